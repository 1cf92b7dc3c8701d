"""Relay turns through served Iris: the spec's own example and a test agent, over the session
API; what the POST carries, how a turn ends (done, Stop, silence, a refused POST), and that
nothing late gets through."""

from __future__ import annotations

import re
import socket
import uuid
from pathlib import Path

import pytest

from iris_runtime.testing.relay_agent import listening
from tests.custom_agents.conftest import HERE, Setup, wait_until, write_manifest
from tests.web.conftest import SSEReader, in_background

SPEC_EXAMPLE_PORT = 8700  # the spec's complete relay example listens here, unchanged


def test_the_spec_relay_example_runs_unchanged(setup: Setup) -> None:
    import subprocess
    import sys

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", SPEC_EXAMPLE_PORT)) == 0:
            pytest.skip("port 8700, which the spec's example uses, is taken")
    env = {"WIRELING_REACH_SOCK": str(setup.socket_path), "PATH": "/usr/bin:/bin"}
    example = subprocess.Popen(
        [sys.executable, str(HERE / "spec_examples" / "echo-relay.py")], env=env
    )
    try:
        write_manifest(
            setup.agents_d,
            "echo-relay.json",
            '{ "kind": "echo-relay", "label": "Echo (relay)", '
            '"relay": "http://127.0.0.1:8700/inbound" }',
        )
        iris = setup.serve()
        wait_until(lambda: listening(SPEC_EXAMPLE_PORT))
        reply = iris.post("/sessions/spec/message", json_body={"text": "@echo-relay hello there"})
        assert reply.status == 200, reply.body
        assert reply.json()["text"] == "You said: hello there"
        assert reply.json()["status"] == "done"
    finally:
        example.terminate()
        example.wait(10)


def test_a_turn_posts_the_message_and_streams_the_reply_back(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve()
    reply = setup.ask("s1", "@butler echo good morning")
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "You said: good morning"
    entry = next(e for e in agent.entries() if "post" in e)
    assert entry["content_type"] == "application/json" and entry["path"] == "/inbound"
    post = entry["post"]
    assert set(post) == {"v", "type", "chat_id", "turn_id", "text", "images", "cwd", "origin"}
    assert post["v"] == 1 and post["type"] == "message" and post["origin"] == "user"
    assert post["text"] == "echo good morning" and post["images"] == []
    assert str(uuid.UUID(post["chat_id"])) == post["chat_id"]
    assert re.fullmatch(r"t_[0-9a-f]{32}", post["turn_id"])
    assert post["cwd"] == str(setup.data_dir)
    # The same conversation keeps its chat id; another gets its own.
    setup.ask("s1", "@butler echo again")
    setup.ask("s2", "@butler echo elsewhere")
    chats = [p["chat_id"] for p in agent.posts("message")]
    assert chats[0] == chats[1] != chats[2]
    assert len({p["turn_id"] for p in agent.posts("message")}) == 3
    # The session the relay answered with is recorded with the chat.
    chats_file = (setup.data_dir / "custom-agents" / "chats.json").read_text()
    assert f"s-{chats[0]}" in chats_file
    log = (setup.data_dir / "SESSION-s1" / "log.jsonl").read_text()
    assert '"agent":"butler"' in log


def test_tool_cards_and_progress_reach_the_sse_stream(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    stream = SSEReader(iris, "cards")
    reply = setup.ask("cards", "@butler tools")
    assert reply.json()["text"] == "It argues three things."
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    stream.close()
    tools = [e for e in stream.events if e["event"] == "tool"]
    card = f"{agent.posts('message')[0]['turn_id']}:1"  # the agent's id, within its turn
    assert [(t["phase"], t["id"], t["name"], t["kind"]) for t in tools] == [
        ("start", card, "report.pdf", "read"),
        ("end", card, "report.pdf", "read"),
    ]
    assert tools[0]["args"] == {"file_path": "report.pdf"}
    assert tools[1]["result"] == "42 pages" and tools[1]["isError"] is False
    statuses = [e["text"] for e in stream.events if e["event"] == "status"]
    assert "Butler: It argues three things." in statuses


def test_nothing_gets_through_after_done(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve()
    reply = setup.ask("late", "@butler late")
    assert reply.json()["text"] == "on time"
    refused = wait_until(
        lambda: [e for e in agent.entries() if e.get("op") and e["reply"] != {"ok": True}]
    )
    wait_until(lambda: len([e for e in agent.entries() if e.get("op")]) == 4)
    replies = [(e["op"], e["reply"]) for e in agent.entries() if e.get("op")]
    assert replies == [
        ("turn.delta", {"ok": True}),
        ("turn.done", {"ok": True}),
        ("turn.delta", {"error": "no such turn"}),
        ("turn.tool", {"error": "no such turn"}),
    ]
    assert refused
    history = setup.iris.get("/sessions/late/history").json()["entries"]  # type: ignore[union-attr]
    assert "too late" not in str(history)


def test_stop_ends_the_turn_at_once_and_posts_stop_once(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    pending = in_background(lambda: setup.ask("hold", "@butler hang on"))
    message = wait_until(lambda: agent.posts("message"))[0]
    assert iris.post("/sessions/hold/stop").json() == {"stopped": True}
    reply = pending(30)
    assert reply.status == 200 and reply.json()["status"] == "stopped"
    wait_until(lambda: [e for e in agent.entries() if e.get("op") == "turn.delta"])
    stops = agent.posts("stop")
    assert stops == [
        {"v": 1, "type": "stop", "chat_id": message["chat_id"], "turn_id": message["turn_id"]}
    ]
    late = [e["reply"] for e in agent.entries() if e.get("op") == "turn.delta"]
    assert late == [{"error": "no such turn"}]


def test_silence_ends_the_turn_and_later_requests_are_refused(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve(IRIS_RELAY_SILENCE_MS="1500")
    reply = setup.ask("quiet", "@butler hang")
    assert reply.status == 502
    assert "(butler failed: it went silent: nothing arrived for 1.5 s)" in reply.json()["text"]
    turn_id = agent.posts("message")[0]["turn_id"]
    with setup.reach() as reach:
        assert reach.request("turn.delta", turn_id=turn_id, text="x") == {"error": "no such turn"}
        assert reach.request("turn.done", turn_id=turn_id) == {"error": "no such turn"}


def test_a_refused_post_or_a_dead_relay_fails_the_turn_clearly(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve()
    refused = setup.ask("r", "@butler refuse this")
    assert refused.status == 502
    url = f"http://127.0.0.1:{agent.port}/inbound"
    assert refused.json()["text"] == (
        f"(butler failed: the relay at {url} refused the turn: HTTP 500)"
    )
    agent.stop()
    dead = setup.ask("r", "@butler echo anyone?")
    assert dead.status == 502
    assert dead.json()["text"] == (
        f"(butler failed: the relay at {url} refused the connection (is it running?))"
    )


def test_a_restart_of_iris_ends_open_turns(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    pending = in_background(lambda: setup.ask("r", "@butler hang"))
    turn_id = wait_until(lambda: agent.posts("message"))[0]["turn_id"]
    iris.restart()
    pending(30)
    with setup.reach() as reach:
        assert reach.request("turn.delta", turn_id=turn_id, text="x") == {"error": "no such turn"}
    assert setup.ask("r", "@butler echo back").json()["text"] == "You said: back"


def test_iris_own_model_delegates_to_a_custom_agent(setup: Setup, tmp_path: Path) -> None:
    import json

    agent = setup.relay("butler")
    script = tmp_path / "script.json"
    rules = [
        {
            "when": "ask the butler",
            "turns": [
                [{"tool": "call_custom_agent", "args": {"agent": "butler", "message": "echo tea"}}],
                [{"text": "The butler has answered."}],
            ],
        }
    ]
    script.write_text(json.dumps({"rules": rules}))
    iris = setup.serve(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    stream = SSEReader(iris, "model")
    reply = setup.ask("model", "please ask the butler")
    assert reply.json()["text"] == "The butler has answered."
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    stream.close()
    ends = [e for e in stream.events if e["event"] == "tool" and e["phase"] == "end"]
    assert [(e["name"], e["result"], e["isError"]) for e in ends] == [
        ("call_custom_agent", "You said: tea", False)
    ]
    assert agent.posts("message")[0]["text"] == "echo tea"


def test_attachments_are_named_in_the_text_and_images_sent_inline(setup: Setup) -> None:
    import base64

    agent = setup.relay("butler")
    iris = setup.serve()
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    handles = []
    for name, data in (("report.pdf", b"%PDF-1.4 tiny"), ("chart.png", png)):
        staged = iris.post("/sessions/att/attachments", body=data, headers={"X-Filename": name})
        assert staged.status == 201, staged.body
        handles.append({"local": staged.json()["local"]})
    reply = iris.post(
        "/sessions/att/message",
        json_body={"text": "@butler echo look", "attachments": handles},
    )
    assert reply.status == 200, reply.body
    post = agent.posts("message")[0]
    assert post["text"] == "echo look\n\nAttached: report.pdf, chart.png"
    assert post["images"] == [{"mime": "image/png", "data_b64": base64.b64encode(png).decode()}]

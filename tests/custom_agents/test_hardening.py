"""Regression tests for the review of custom agents part 1, each through served Iris: the reach
socket under load and bad input, the inbound listener's guards, long replies, tool-card ids,
the tool environment, chats, and the catalog's re-examining of skipped files."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.custom_agents.reach_client import ReachConnection
from iris_runtime.testing.server import clean_environment, run_iris
from iris_runtime.testing.subagent import register
from tests.custom_agents.conftest import Setup, wait_until, write_manifest
from tests.web.conftest import SSEReader, in_background

RELAY = {"kind": "butler", "label": "Butler", "relay": "http://127.0.0.1:8700/inbound"}


# -- the reach socket -----------------------------------------------------------------------


def test_callers_that_leave_while_every_slot_is_taken_do_not_stop_the_listener(
    setup: Setup,
) -> None:
    from iris_runtime.custom_agents.reach import MAX_CONNECTIONS

    setup.serve()
    idle = []
    for _ in range(MAX_CONNECTIONS):
        conn = ReachConnection(setup.socket_path, timeout=10)
        assert conn.request("chats")["ok"] is True  # served: it holds a slot
        idle.append(conn)
    for _ in range(5):  # refused for want of a slot, and already gone when told so
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(setup.socket_path))
        time.sleep(0.05)
    for conn in idle:
        conn.close()
    fresh = wait_until(lambda: _try_chats(setup.socket_path))
    assert fresh["ok"] is True


def _try_chats(path: Path) -> dict[str, Any] | None:
    try:
        with ReachConnection(path, timeout=5) as conn:
            answer = conn.request("chats")
    except Exception:
        return None
    return answer if answer.get("ok") else None


def test_strings_that_are_not_unicode_are_refused_and_the_connection_lives(
    setup: Setup,
) -> None:
    setup.relay("butler")
    setup.serve()
    replies = setup.reach_raw(b'{"op": "\\ud800"}\n{"op": "chats"}\n')
    assert replies[0] == {
        "error": "every string must be valid Unicode (a lone surrogate cannot be sent)"
    }
    assert replies[1]["ok"] is True
    bad_id = setup.reach_raw(b'{"op": "turn.tool", "turn_id": "t_x", "id": []}\n')
    assert bad_id == [{"error": '"id" must be a string or an integer'}]


def test_a_lone_surrogate_in_a_delta_never_reaches_the_log(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve()
    pending = in_background(lambda: setup.ask("sur", "@butler hang"))
    turn_id = wait_until(lambda: agent.posts("message"))[0]["turn_id"]
    tid = json.dumps(turn_id).encode()
    replies = setup.reach_raw(
        b'{"op": "turn.delta", "turn_id": ' + tid + b', "text": "\\ud800"}\n'
        b'{"op": "turn.delta", "turn_id": ' + tid + b', "text": "fine"}\n'
        b'{"op": "turn.done", "turn_id": ' + tid + b"}\n",
    )
    assert [("error" in r) for r in replies] == [True, False, False], replies
    reply = pending(30)
    assert reply.status == 200 and reply.json()["text"] == "fine"


# -- long replies -----------------------------------------------------------------------------


def test_many_deltas_cost_linear_time(setup: Setup) -> None:
    agent = setup.relay("butler")
    setup.serve()
    started = time.monotonic()
    reply = setup.ask("flood", "@butler flood 8000 100")
    took = time.monotonic() - started
    assert reply.status == 200, reply.body
    assert reply.json()["text"].startswith("word " * 200)
    assert took < 30, f"8000 deltas took {took:.1f} s"
    assert agent.process is not None


def test_a_reply_longer_than_the_cap_is_cut_with_a_note(setup: Setup) -> None:
    from iris_runtime.custom_agents.turns import MAX_TURN_TEXT_CHARS

    setup.relay("butler")
    setup.serve()
    size = 100_000
    count = MAX_TURN_TEXT_CHARS // size + 2
    reply = setup.ask("long", f"@butler flood {count} {size}")
    assert reply.status == 200, reply.body
    text = reply.json()["text"]
    assert text.startswith(("word " * MAX_TURN_TEXT_CHARS)[:MAX_TURN_TEXT_CHARS])
    cut = text[MAX_TURN_TEXT_CHARS:]
    assert (
        cut == f"\n\n(the reply was cut here: it is longer than {MAX_TURN_TEXT_CHARS} characters)"
    )


# -- tool cards -------------------------------------------------------------------------------


def test_two_turns_that_reuse_a_tool_call_id_get_cards_of_their_own(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    stream = SSEReader(iris, "twice")
    assert setup.ask("twice", "@butler tools").status == 200
    assert setup.ask("twice", "@butler tools").status == 200
    stream.wait_for(lambda evs: len([e for e in evs if e["event"] == "final"]) == 2)
    stream.close()
    first, second = (p["turn_id"] for p in agent.posts("message"))
    ids = [(e["phase"], e["id"]) for e in stream.events if e["event"] == "tool"]
    assert ids == [
        ("start", f"{first}:1"),
        ("end", f"{first}:1"),
        ("start", f"{second}:1"),
        ("end", f"{second}:1"),
    ]


# -- the tool environment ---------------------------------------------------------------------


def test_a_command_run_by_iris_knows_its_chat_and_the_reach_socket(
    setup: Setup, tmp_path: Path
) -> None:
    wireling = str(Path(sys.executable).parent / "wireling")
    # Iris's own IRIS_REACH_SOCKET reaches the command; the chat is what she must add.
    command = f"env -u IRIS_REACH_SOCKET {wireling} note from the shell"
    rules = [
        {
            "when": "leave a note",
            "turns": [[{"tool": "bash", "args": {"command": command}}], [{"text": "noted"}]],
        }
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": rules}))
    iris = setup.serve(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    reply = setup.ask("shell", "please leave a note")
    assert reply.status == 200, reply.body
    entries = iris.get("/sessions/shell/history").json()["entries"]
    assert [e["text"] for e in entries if e.get("type") == "note"] == ["from the shell"]


# -- chats ------------------------------------------------------------------------------------


def test_chats_lists_the_conversations_not_only_those_agents_touched(setup: Setup) -> None:
    setup.serve()
    assert setup.ask("plain", "hello").status == 200
    with setup.reach() as reach:
        listed = reach.request("chats")["chats"]
        assert "SESSION-plain" in [c["channel"] for c in listed]
        chat = next(c["chat_id"] for c in listed if c["channel"] == "SESSION-plain")
        # The id it was listed under is a real one, and stays the same.
        assert reach.request("note", text="hi", chat=chat) == {"ok": True, "chat_id": chat}
        again = reach.request("chats")["chats"]
    assert {c["chat_id"] for c in again if c["channel"] == "SESSION-plain"} == {chat}


def test_a_corrupt_chat_book_is_kept_aside_not_overwritten(setup: Setup) -> None:
    book = setup.data_dir / "custom-agents" / "chats.json"
    book.parent.mkdir(parents=True)
    book.write_text('{"chats": {"3f2b": {"channel": "SESSION-x"}')  # cut short
    iris = setup.serve()
    with setup.reach() as reach:
        assert reach.request("chat.new")["ok"] is True
    kept = list(book.parent.glob("chats.json.bad-*"))
    assert len(kept) == 1 and kept[0].read_text().startswith('{"chats": {"3f2b"')
    assert json.loads(book.read_text())["chats"]
    wait_until(lambda: f"kept aside as {kept[0]}" in iris.log_tail(400))


# -- the catalog ------------------------------------------------------------------------------


def test_a_file_skipped_for_a_clash_loads_once_the_clash_is_gone(setup: Setup) -> None:
    iris = setup.serve()
    write_manifest(setup.agents_d, "a.json", {**RELAY, "label": "First"})
    write_manifest(setup.agents_d, "b.json", {**RELAY, "label": "Second"})
    wait_until(lambda: setup.custom_agents()["skipped"])
    write_manifest(setup.agents_d, "a.json", {**RELAY, "kind": "other", "label": "First"})
    reply = iris.post("/custom-agents/butler/restart", json_body={})
    assert reply.status == 200, reply.body
    assert reply.json()["agent"]["label"] == "Second"
    listed = setup.custom_agents()
    assert {a["kind"]: a["label"] for a in listed["agents"]} == {
        "butler": "Second",
        "other": "First",
    }
    assert listed["skipped"] == []


def test_a_fixed_file_is_reread_even_with_its_old_mtime(setup: Setup) -> None:
    path = write_manifest(setup.agents_d, "x.json", {**RELAY, "kind": "x", "relay": "nope"})
    before = path.stat()
    setup.serve()
    assert setup.custom_agents()["skipped"]
    write_manifest(setup.agents_d, "x.json", {**RELAY, "kind": "x"})
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    wait_until(lambda: [a["kind"] for a in setup.custom_agents()["agents"]] == ["x"])


def test_a_fifo_in_agents_d_is_skipped_not_waited_on(setup: Setup) -> None:
    setup.agents_d.mkdir(parents=True)
    os.mkfifo(setup.agents_d / "a-fifo.json")
    setup.relay("butler")
    setup.serve()
    listed = setup.custom_agents()
    assert [a["kind"] for a in listed["agents"]] == ["butler"]
    assert [s["reason"] for s in listed["skipped"]] == ["not a regular file"]


def test_a_bridge_agent_registered_later_unloads_the_custom_one(setup: Setup) -> None:
    setup.relay("butler")
    iris = setup.serve()
    assert [a["kind"] for a in setup.custom_agents()["agents"]] == ["butler"]
    register(iris, "butler", "http://127.0.0.1:9/")
    skipped = wait_until(lambda: setup.custom_agents()["skipped"])
    assert skipped[0]["reason"] == (
        "\"kind\" 'butler' is already the name of a registered sub-agent"
    )
    assert setup.custom_agents()["agents"] == []
    gone = run_iris(
        "agents", "unregister", "butler", env=clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    )
    assert gone.returncode == 0, gone.stderr
    wait_until(lambda: setup.custom_agents()["agents"])


def test_a_manifest_with_a_duplicate_key_is_refused() -> None:
    from iris_runtime.custom_agents.manifest import ManifestError, parse_manifest

    data = b'{"kind": "a", "kind": "b", "relay": "http://127.0.0.1:1/"}'
    with pytest.raises(ManifestError) as raised:
        parse_manifest(data)
    assert str(raised.value) == 'duplicate key "kind"'


# -- Iris as a relay agent --------------------------------------------------------------------


def test_the_inbound_listener_takes_only_json_from_no_web_page(setup: Setup) -> None:
    _, url = setup.inner_iris([])
    port = url.split(":")[2].split("/")[0]
    body = json.dumps({"v": 1, "type": "typing", "chat_id": "x"})
    json_type = {"Content-Type": "application/json"}
    assert requests.post(url, data=body, headers=json_type, timeout=10).status_code == 200
    # A page's no-cors fetch can only send text/plain; it is refused.
    plain = requests.post(url, data=body, headers={"Content-Type": "text/plain"}, timeout=10)
    assert plain.status_code == 415
    origin = requests.post(
        url, data=body, headers={**json_type, "Origin": "http://evil.example"}, timeout=10
    )
    assert origin.status_code == 403
    rebound = requests.post(
        url, data=body, headers={**json_type, "Host": f"evil.example:{port}"}, timeout=10
    )
    assert rebound.status_code == 403
    guessed = requests.post(f"http://127.0.0.1:{port}/", data=body, headers=json_type, timeout=10)
    assert guessed.status_code == 404
    localhost = url.replace("127.0.0.1", "localhost")
    assert requests.post(localhost, data=body, headers=json_type, timeout=10).status_code == 200


def test_the_inbound_answers_503_without_an_upstream(setup: Setup) -> None:
    _, url = setup.inner_iris([])
    message = {
        "v": 1,
        "type": "message",
        "chat_id": "3f2b8c1e-7a40-4d8e-9b1c-5e6f7a8b9c0d",
        "turn_id": "t_1",
        "text": "hi",
    }
    reply = requests.post(url, json=message, timeout=10)
    assert reply.status_code == 503
    assert "IRIS_UPSTREAM_REACH_SOCKET" in reply.json()["error"]


def test_a_long_inner_run_keeps_the_outer_turn_alive(setup: Setup) -> None:
    rules = [{"when": "think", "turns": [[{"sleep": 4}, {"text": "thought it through"}]]}]
    _, url = setup.inner_iris(
        rules,
        IRIS_UPSTREAM_REACH_SOCKET=str(setup.socket_path),
        IRIS_RELAY_SILENCE_MS="1500",
    )
    write_manifest(setup.agents_d, "inner.json", {"kind": "inner", "relay": url})
    setup.serve(IRIS_RELAY_SILENCE_MS="1500")
    reply = setup.ask("outer", "@inner think")
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "thought it through"


def test_a_stop_for_another_turn_leaves_the_run_alone(setup: Setup) -> None:
    rules = [{"when": "slow", "turns": [[{"sleep": 6}, {"text": "done slowly"}]]}]
    inner, url = setup.inner_iris(rules, IRIS_UPSTREAM_REACH_SOCKET=str(setup.socket_path))
    write_manifest(setup.agents_d, "inner.json", {"kind": "inner", "relay": url})
    setup.serve()
    pending = in_background(lambda: setup.ask("outer", "@inner slow"))

    def running() -> bool:
        logs = list(inner.data_dir.glob("SESSION-relay-*/log.jsonl"))
        return bool(logs) and "slow" in logs[0].read_text()

    wait_until(running)
    with setup.reach() as reach:
        chat = next(
            c["chat_id"] for c in reach.request("chats")["chats"] if c["channel"] == "SESSION-outer"
        )
    stop = {"v": 1, "type": "stop", "chat_id": chat, "turn_id": "t_someone_else"}
    assert requests.post(url, json=stop, timeout=10).status_code == 200
    reply = pending(30)
    assert reply.status == 200 and reply.json()["text"] == "done slowly"


def test_an_inbound_port_in_use_does_not_stop_iris(setup: Setup) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        iris = setup.serve(IRIS_RELAY_INBOUND_PORT=str(port))
        assert iris.get("/custom-agents").status == 200
        wait_until(lambda: "the relay inbound cannot listen" in iris.log_tail(400))

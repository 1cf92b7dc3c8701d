"""Custom relay agents (spec 004) in the Web UI: listed in the agent picker by label with their
readiness, picked like a sub-agent, their text streaming in as ``reply`` frames and their tool
calls drawn as the run's own tool cards; Iris's model is never asked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from server_harness import WebIris

from iris_runtime.testing.relay_agent import RelayAgent
from iris_runtime.testing.server import free_port


def test_a_relay_agent_is_picked_streams_and_draws_tool_cards(
    start_web_iris: Callable[..., WebIris], tmp_path: Path, socket_dir: Path
) -> None:
    reach = socket_dir / "reach.sock"
    agent = RelayAgent(free_port(), reach, tmp_path / "butler.jsonl").start()
    try:
        data = tmp_path / "data"
        agents_d = data / "agents.d"
        agents_d.mkdir(parents=True)
        url = f"http://127.0.0.1:{agent.port}/inbound"
        (agents_d / "butler.json").write_text(
            json.dumps({"kind": "butler", "label": "Butler", "relay": url})
        )
        locked = {"file": str(tmp_path / "no-such-token.json"), "contains": "access_token"}
        (agents_d / "vault.json").write_text(
            json.dumps({"kind": "vault", "label": "Vault keeper", "relay": url, "auth": locked})
        )
        web = start_web_iris(data_dir=data, IRIS_REACH_SOCKET=str(reach))
        http = web.login()
        listed = http.get(f"{web.url}/api/agents", timeout=30).json()
        assert listed == [
            {"name": "butler", "label": "Butler", "status": "ready"},
            {"name": "vault", "label": "Vault keeper", "status": "needs_sign_in"},
        ]

        session = web.new_session(http)
        sock = web.connect(http, session, agent="butler")
        assert sock.recv()["agent"] == "butler"
        sock.send({"type": "message", "text": "tools"})
        frames = sock.final()
        cards = [f for f in frames if f["type"] == "tool"]
        assert [(c["phase"], c["kind"], c["title"], c["subtitle"]) for c in cards] == [
            ("start", "read", "report.pdf", "report.pdf"),
            ("end", "read", "report.pdf", "report.pdf"),
        ]
        assert cards[1]["result"] == "42 pages" and cards[0]["id"] == cards[1]["id"]
        turn_id = agent.posts("message")[0]["turn_id"]
        assert cards[0]["id"] == f"{turn_id}:1"  # the agent's "1", within its turn
        replies = [f["text"] for f in frames if f["type"] == "reply"]
        assert replies[-1] == "It argues three things."
        assert frames[-1]["agent"] == "butler" and frames[-1]["status"] == "completed"
        assert web.calls.read_text() == ""  # Iris's model was never asked

        signed_out = web.connect(http, web.new_session(http), agent="vault")
        assert signed_out.recv()["agent"] == "vault"
        signed_out.send({"type": "message", "text": "echo hi"})
        assert "it needs sign-in first" in signed_out.final()[-1]["text"]
    finally:
        agent.stop()


def test_an_acp_agent_is_picked_streams_thinks_and_draws_tool_cards(
    start_web_iris: Callable[..., WebIris], tmp_path: Path, socket_dir: Path
) -> None:
    import sys

    data = tmp_path / "data"
    agents_d = data / "agents.d"
    agents_d.mkdir(parents=True)
    manifest = {
        "kind": "coder",
        "label": "Coder",
        "bin": sys.executable,
        "args": ["-m", "iris_runtime.testing.acp_agent", str(tmp_path / "coder.jsonl")],
        "models": [{"id": "fast"}, {"id": "deep"}],
    }
    (agents_d / "coder.json").write_text(json.dumps(manifest))
    web = start_web_iris(data_dir=data, IRIS_REACH_SOCKET=str(socket_dir / "reach.sock"))
    http = web.login()
    listed = http.get(f"{web.url}/api/agents", timeout=30).json()
    assert listed == [{"name": "coder", "label": "Coder", "status": "ready"}]
    sock = web.connect(http, web.new_session(http), agent="coder")
    assert sock.recv()["agent"] == "coder"
    sock.send({"type": "message", "text": "tools"})
    frames = sock.final()
    cards = [f for f in frames if f["type"] == "tool"]
    assert [(c["phase"], c["kind"], c["title"], c["subtitle"]) for c in cards] == [
        ("start", "read", "Read report.pdf", "/srv/report.pdf"),
        ("end", "read", "Read report.pdf", "/srv/report.pdf"),
    ]
    assert cards[1]["result"] == "42 pages"
    assert [f["text"] for f in frames if f["type"] == "reply"][-1] == "read it"
    # The model is chosen with the same chat command as on every transport.
    sock.send({"type": "message", "text": "/model deep"})
    assert sock.final()[-1]["text"] == "Coder uses deep from the next message."
    assert web.calls.read_text() == ""  # Iris's model was never asked

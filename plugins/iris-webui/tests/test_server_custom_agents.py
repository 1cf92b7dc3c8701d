"""Custom relay agents (spec 004) in the Web UI: listed in the agent picker by label with their
readiness, picked like a sub-agent, their text streaming in as ``reply`` frames and their tool
calls drawn as the run's own tool cards; Iris's model is never asked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from server_harness import WebIris

from iris_runtime.testing import acp_agent
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


def serve_the_coder(
    start_web_iris: Callable[..., WebIris], tmp_path: Path, socket_dir: Path, **manifest: Any
) -> tuple[WebIris, requests.Session]:
    """A served Web UI hosting the test ACP agent as ``coder`` (``manifest`` adds its keys),
    and a signed-in client."""
    data = tmp_path / "data"
    acp_agent.install(data / "agents.d", tmp_path / "coder.jsonl", "coder", **manifest)
    web = start_web_iris(data_dir=data, IRIS_REACH_SOCKET=str(socket_dir / "reach.sock"))
    return web, web.login()


def test_an_acp_agent_is_picked_streams_thinks_and_draws_tool_cards(
    start_web_iris: Callable[..., WebIris], tmp_path: Path, socket_dir: Path
) -> None:
    web, http = serve_the_coder(
        start_web_iris, tmp_path, socket_dir, models=[{"id": "fast"}, {"id": "deep"}]
    )
    listed = http.get(f"{web.url}/api/agents", timeout=30).json()
    models = [{"id": "fast", "label": "fast"}, {"id": "deep", "label": "deep"}]
    assert listed == [{"name": "coder", "label": "Coder", "status": "ready", "models": models}]
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


def test_the_model_picker_sets_an_acp_agents_model_as_the_chat_command_does(
    start_web_iris: Callable[..., WebIris], tmp_path: Path, socket_dir: Path
) -> None:
    models = [{"id": "fast", "label": "Fast"}, {"id": "deep", "label": "Deep"}]
    web, http = serve_the_coder(
        start_web_iris, tmp_path, socket_dir, models=models, modelEnv="TEST_AGENT_MODEL"
    )
    session = web.new_session(http)
    path = f"{web.url}/api/sessions/{session}/agents/coder/model"
    assert http.get(path, timeout=30).json() == {"model": None, "models": models}

    chosen = http.post(path, json={"model": "deep"}, timeout=30)
    assert chosen.status_code == 200, chosen.text
    assert chosen.json() == {
        "model": "deep",
        "models": models,
        "text": "Coder uses Deep from the next message.",
    }
    sock = web.connect(http, session, agent="coder")
    assert sock.recv()["agent"] == "coder"
    sock.send({"type": "message", "text": "env"})
    assert "model=deep" in sock.final()[-1]["text"]
    # The chat command and the picker share one choice.
    sock.send({"type": "message", "text": "/model fast"})
    assert sock.final()[-1]["text"] == "Coder uses Fast from the next message."
    assert http.get(path, timeout=30).json()["model"] == "fast"
    assert http.post(path, json={"model": "default"}, timeout=30).json()["model"] is None

    unknown = http.post(path, json={"model": "huge"}, timeout=30)
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_model"
    other = f"{web.url}/api/sessions/{session}/agents/nobody/model"
    assert http.get(other, timeout=30).status_code == 404
    missing = f"{web.url}/api/sessions/no-such-chat/agents/coder/model"
    assert http.get(missing, timeout=30).status_code == 404
    assert web.calls.read_text() == ""  # Iris's model was never asked

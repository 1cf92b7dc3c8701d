"""``?agent=``: a socket pinned to a sub-agent. A real sub-agent runtime answers without Iris's
own model being called, its status lines arrive live; an unknown name and a dead agent give
clear errors, never silence."""

from __future__ import annotations

from collections.abc import Callable

from server_harness import WebIris

from iris_runtime.testing.server import free_port
from iris_runtime.testing.subagent import SubAgent, register


def test_a_pinned_socket_talks_to_the_sub_agent_directly(
    start_web_iris: Callable[..., WebIris], start_subagent: Callable[..., SubAgent]
) -> None:
    helper = start_subagent(
        "helper",
        [
            {
                "when": "count",
                "turns": [
                    [{"tool": "bash", "args": {"command": "echo 3"}}],
                    [{"text": "helper says: three"}],
                ],
            }
        ],
    )
    web = start_web_iris()
    register(web.server, "helper", helper.bridge_url, token=helper.token)
    http = web.login()
    agents = http.get(f"{web.url}/api/agents", timeout=30).json()
    assert agents == [{"name": "helper"}]  # the name only: no URL, no token

    session = web.new_session(http)
    sock = web.connect(http, session, agent="helper")
    assert sock.recv() == {"type": "ready", "session": session, "agent": "helper", "running": False}
    sock.send({"type": "message", "text": "@other count to three"})  # no @-parsing on a pin
    frames = sock.final()
    statuses = [f["text"] for f in frames if f["type"] == "status"]
    assert "→ asking helper" in statuses
    assert "→ running bash" in statuses  # the sub-agent's own progress, live
    final = frames[-1]
    assert final["text"] == "helper says: three"
    assert final["status"] == "completed" and final["agent"] == "helper"
    assert web.calls.read_text() == ""  # Iris's model was never asked

    history = web.history(http, session)
    assert [(m["role"], m["text"]) for m in history] == [
        ("user", "@other count to three"),
        ("assistant", "helper says: three"),
    ]
    assert history[1]["agent"] == "helper"

    # The same conversation without a pin is Iris's own again.
    plain = web.connect(http, session)
    assert plain.recv()["agent"] is None
    plain.send({"type": "message", "text": "hello Iris"})
    assert plain.final()[-1]["text"] == "echo: hello Iris"
    assert "hello Iris" in web.calls.read_text()


def test_an_unknown_agent_is_refused_with_a_clear_error(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session, agent="nobody")
    assert sock.recv()["agent"] == "nobody"
    error = sock.recv()
    assert error["type"] == "error" and error["code"] == "unknown_agent"
    assert "nobody" in error["message"]
    sock.send({"type": "message", "text": "hello?"})
    assert sock.recv()["code"] == "unknown_agent"
    sock.send({"type": "ping"})  # the socket stays open
    assert sock.recv() == {"type": "pong"}
    assert web.calls.read_text() == "" and web.history(http, session) == []


def test_a_dead_sub_agent_gives_the_bridges_error_not_silence(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    register(web.server, "ghost", f"http://127.0.0.1:{free_port()}")  # nothing listens
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session, agent="ghost")
    sock.recv()
    sock.send({"type": "message", "text": "are you there?"})
    frames = sock.final()
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 1 and errors[0]["code"] == "agent_unreachable"
    assert "unreachable" in errors[0]["message"]
    assert frames[-1]["status"] == "error" and "ghost failed" in frames[-1]["text"]
    assert web.calls.read_text() == ""

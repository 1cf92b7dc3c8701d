"""A real background sub-agent in a Web UI conversation (served Iris, scripted provider): the
conversation's socket gets the sub-agent's ``subagent`` frames and its announce once, the history
keeps both, and ``/subagents`` answers on the socket without a model turn."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from server_harness import WebIris

RULES = [
    {
        "when": "look into the logs",
        "turns": [
            [{"tool": "sessions_spawn", "args": {"task": "log digging child", "label": "logs"}}],
            [{"text": "A sub-agent is on it."}],
        ],
    },
    {"when": "log digging child", "turns": [[{"text": "found 3 errors"}]]},
    {"when": "Your task has ended", "turns": [[{"text": "Three errors, all from the cron job."}]]},
]


def test_a_spawned_sub_agent_shows_on_the_socket_and_in_the_history(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    web = start_web_iris(RULES, data_dir=tmp_path / "iris-data")
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session)
    assert sock.recv()["type"] == "ready"
    sock.send({"type": "message", "text": "look into the logs"})
    seen = sock.until(lambda f: f.get("type") == "post")
    phases = [f["phase"] for f in seen if f.get("type") == "subagent"]
    assert phases[:3] == ["spawned", "started", "finished"]
    assert {f["label"] for f in seen if f.get("type") == "subagent"} == {"logs"}
    [post] = [f for f in seen if f.get("type") == "post"]
    assert post["text"].startswith('Sub-agent #1 "logs" (agent main) finished.')
    assert "Result: Three errors, all from the cron job." in post["text"]
    announced = sock.until(lambda f: f.get("type") == "subagent" and f["phase"] == "announced")
    assert announced[-1]["status"] == "success"

    sock.send({"type": "message", "text": "/subagents list"})
    replies = sock.final()
    assert '#1 "logs" · main · success' in replies[-1]["text"]

    history = web.history(http, session)
    shown = [m for m in history if "Three errors, all from the cron job." in str(m.get("text"))]
    assert len(shown) == 1
    assert any(m.get("role") == "subagent" for m in history)

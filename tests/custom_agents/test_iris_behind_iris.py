"""Iris as a relay agent for another Iris: the outer one hosts the inner one through a manifest,
the inner one answers through the outer one's reach socket (tool cards and reply), and a Stop
on the outside stops the run inside."""

from __future__ import annotations

import json

from tests.custom_agents.conftest import Setup, wait_until, write_manifest
from tests.web.conftest import SSEReader, in_background

INNER_RULES = [
    {
        "when": "disk",
        "turns": [
            [{"tool": "bash", "args": {"command": "echo 42"}}],
            [{"text": "the disk is fine"}],
        ],
    },
    {"when": "slow", "turns": [[{"sleep": 30}, {"text": "too slow"}]]},
]


def test_one_iris_sits_behind_another(setup: Setup) -> None:
    inner, url = setup.inner_iris(INNER_RULES, IRIS_UPSTREAM_REACH_SOCKET=str(setup.socket_path))
    write_manifest(setup.agents_d, "inner.json", {"kind": "inner", "label": "Inner", "relay": url})
    outer = setup.serve()
    stream = SSEReader(outer, "outer")
    reply = setup.ask("outer", "@inner how is the disk?")
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "the disk is fine"
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    stream.close()
    tools = [(e["phase"], e["name"], e["kind"]) for e in stream.events if e["event"] == "tool"]
    assert tools == [("start", "bash", "execute"), ("end", "bash", "execute")]
    # The inner Iris kept the conversation as a session of her own.
    sessions = [p.name for p in inner.data_dir.iterdir() if p.name.startswith("SESSION-relay-")]
    assert len(sessions) == 1

    pending = in_background(lambda: setup.ask("outer", "@inner slow"))

    def inner_running() -> bool:
        log = inner.data_dir / sessions[0] / "log.jsonl"
        return "slow" in log.read_text()

    wait_until(inner_running)
    assert outer.post("/sessions/outer/stop").json() == {"stopped": True}
    assert pending(30).json()["status"] == "stopped"

    def inner_stopped() -> bool:
        lines = (inner.data_dir / sessions[0] / "log.jsonl").read_text().splitlines()
        last = json.loads(lines[-1])
        return last.get("role") == "assistant" and last.get("status") == "stopped"

    wait_until(inner_stopped)


def test_the_inbound_refuses_bad_posts_and_ignores_unknown_types(setup: Setup) -> None:
    import requests

    _, url = setup.inner_iris([])
    bad = requests.post(
        url, data=b"{nope", headers={"Content-Type": "application/json"}, timeout=10
    )
    assert bad.status_code == 400 and bad.json() == {"error": "the body must be a JSON object"}
    odd = requests.post(url, json={"v": 1, "type": "typing", "chat_id": "x"}, timeout=10)
    assert odd.status_code == 200
    no_chat = requests.post(url, json={"v": 1, "type": "message", "text": "hi"}, timeout=10)
    assert no_chat.status_code == 400 and no_chat.json() == {"error": '"chat_id" must be a UUID'}

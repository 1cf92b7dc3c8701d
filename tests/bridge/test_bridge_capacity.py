"""A sub-agent at its stream limit answers 503 at_capacity before any job exists, so Iris waits
as it says (Retry-After) and sends the same request again: the message is delivered once, late,
never lost, and the conversation shows why it is waiting."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from iris_runtime.testing.server import HttpReply, IrisServer
from iris_runtime.testing.subagent import NDJSON, SubAgent, register
from tests.web.conftest import SSEReader, in_background

StartSub = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]
RULES = [{"when": "occupy", "turns": [[{"sleep": 60}]]}]


@dataclass
class BusyAgent:
    """Iris with ``helper`` registered, whose one stream slot another caller holds."""

    iris: IrisServer
    sub: SubAgent
    occupying: requests.Response

    def ask_until_busy(
        self, session: str, text: str
    ) -> tuple[Callable[[float], HttpReply], SSEReader]:
        """Send ``@helper <text>`` and return once the conversation says the agent is busy."""
        watch = SSEReader(self.iris, session)
        pending = in_background(
            lambda: self.iris.post(f"/sessions/{session}/message", json_body={"text": text})
        )
        watch.wait_for(
            lambda evs: any("busy" in str(e.get("text", "")) for e in evs if e["event"] == "status")
        )
        return pending, watch


@pytest.fixture
def busy_agent(start_subagent: StartSub, start_iris: StartIris, tmp_path: Path) -> BusyAgent:
    sub = start_subagent(rules=RULES, IRIS_MAX_STREAMS="1")
    iris = start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(tmp_path / "none.json"))
    register(iris, "helper", sub.bridge_url, token=sub.token)
    occupying = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "occupy the only stream", "conversationKey": "other"},
        headers={"Accept": NDJSON, **sub.auth},
        stream=True,
        timeout=30,
    )
    assert occupying.status_code == 200
    return BusyAgent(iris, sub, occupying)


def test_iris_retries_an_agent_at_capacity_and_delivers_once(busy_agent: BusyAgent) -> None:
    pending, watch = busy_agent.ask_until_busy("c1", "@helper hello there")
    busy_agent.occupying.close()  # the agent notices at its next heartbeat and frees the slot

    reply = pending(60)
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "echo: hello there"
    said = [
        entry
        for log in busy_agent.sub.server.data_dir.glob("*/log.jsonl")
        for entry in map(json.loads, log.read_text().splitlines())
        if entry.get("role") == "user" and "hello there" in entry.get("text", "")
    ]
    assert len(said) == 1  # the agent ran it once: the refused attempts created nothing
    watch.close()


def test_a_stop_while_the_agent_is_busy_is_a_stop_and_sends_nothing(
    busy_agent: BusyAgent,
) -> None:
    pending, watch = busy_agent.ask_until_busy("c2", "@helper never mind")
    assert busy_agent.iris.post("/sessions/c2/stop").json() == {"stopped": True}
    reply = pending(30)
    assert reply.status == 200, reply.body
    assert reply.json()["status"] == "stopped" and "failed" not in reply.json()["text"]
    busy_agent.occupying.close()
    jobs = busy_agent.sub.server.data_dir / "bridge-jobs"
    assert len(list(jobs.iterdir())) == 1  # only the occupying request ever became a job
    watch.close()

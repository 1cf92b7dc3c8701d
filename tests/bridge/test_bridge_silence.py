"""A sub-agent's ``[SILENT]`` reply stays silent all the way: marked on the wire, and Iris posts
nothing for it, exactly as for her own silent runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import requests

from iris_runtime.testing.server import IrisServer
from iris_runtime.testing.subagent import SubAgent, register
from tests.bridge.conftest import parent_of_helper
from tests.web.conftest import SSEReader

StartSub = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]
QUIET = [{"when": "anything new", "turns": [[{"text": "[SILENT] nothing since yesterday"}]]}]


def test_a_silent_reply_is_marked_silent_on_the_wire(start_subagent: StartSub) -> None:
    sub = start_subagent(rules=QUIET)
    final = sub.stream({"text": "anything new?", "requestId": "r-quiet"})[-1]
    assert final["type"] == "final" and final["status"] == "done"
    assert final["text"] == "" and final["silent"] is True  # an old parent sees an empty reply
    plain = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "anything new?", "requestId": "r-quiet-plain"},
        headers=sub.auth,
        timeout=30,
    ).json()
    assert plain == {"text": "", "requestId": "r-quiet-plain", "status": "done", "silent": True}
    job = requests.get(f"{sub.bridge_url}/bridge/jobs/r-quiet", headers=sub.auth, timeout=10)
    assert job.json()["events"][-1]["silent"] is True  # recovery keeps the mark
    spoken = sub.stream({"text": "hello"})[-1]
    assert spoken["text"] == "echo: hello" and "silent" not in spoken


def test_a_silent_sub_agent_leaves_nothing_in_the_parents_conversation(
    start_subagent: StartSub, start_iris: StartIris, tmp_path: Path
) -> None:
    sub = start_subagent(rules=QUIET)
    calls = tmp_path / "iris-calls.jsonl"
    iris = parent_of_helper(start_iris, sub, calls)
    stream = SSEReader(iris, "q1")
    reply = iris.post("/sessions/q1/message", json_body={"text": "@helper anything new?"})
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "" and reply.json()["status"] == "done"
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    stream.close()
    assert [e["text"] for e in stream.events if e["event"] == "final"] == [""]
    log = [
        json.loads(line)
        for line in (iris.data_dir / "SESSION-q1" / "log.jsonl").read_text().splitlines()
    ]
    assert [e["type"] for e in log] == ["message", "bridge_call", "message"]
    assert log[-1]["role"] == "assistant" and log[-1]["text"] == ""
    assert "no reply" not in (iris.data_dir / "SESSION-q1" / "log.jsonl").read_text()
    assert not calls.exists()  # Iris's own model was not asked to fill the silence


def test_call_agent_tells_the_model_the_agent_stayed_silent(
    start_subagent: StartSub, start_iris: StartIris, write_script: Callable[..., Path]
) -> None:
    sub = start_subagent(rules=QUIET)
    delegate = {"tool": "call_agent", "args": {"agent": "helper", "message": "anything new?"}}
    script = write_script(
        [{"when": "check in", "turns": [[delegate], [{"text": "[SILENT] all quiet"}]]}]
    )
    iris = start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    register(iris, "helper", sub.bridge_url, token=sub.token)
    stream = SSEReader(iris, "q2")
    reply = iris.post("/sessions/q2/message", json_body={"text": "check in with helper"})
    assert reply.status == 200 and reply.json()["text"] == "", reply.body
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    stream.close()
    tool_end = next(e for e in stream.events if e["event"] == "tool" and e["phase"] == "end")
    assert tool_end["result"] == "(helper chose to stay silent: it has nothing to say)"
    assert tool_end["isError"] is False

"""What people watching a session see of its sub-agents: ``subagent`` events on the session's
stream, and ``GET /sessions/<id>/subagents``, both as docs/openapi.yaml documents them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from iris_runtime.testing.server import IrisServer
from tests.session_agents.conftest import spawn, wait_for_announces
from tests.web.conftest import SSEReader
from tests.web.test_openapi import SPEC_PATH, assert_documented, resolve, schema_errors

Serve = Callable[..., IrisServer]


def test_events_on_the_stream_and_the_list_match_the_documentation(
    serve: Serve, spec: dict[str, Any]
) -> None:
    iris = serve()
    stream = SSEReader(iris, "w1")
    assert stream.status == 200
    try:
        [accepted] = spawn(iris, "w1", {"task": "watched work", "label": "watched"})
        wait_for_announces(iris, "w1", 1)
        stream.wait_for(
            lambda events: any(e.get("phase") == "announced" for e in events), timeout=15
        )
        mine = [e for e in stream.events if e["event"] == "subagent"]
    finally:
        stream.close()
    phases = [e["phase"] for e in mine]
    assert phases == ["spawned", "started", "finished", "announced"]
    assert {e["runId"] for e in mine} == {accepted["runId"]}
    assert mine[-1]["text"].startswith('Sub-agent #1 "watched"')
    assert [e["status"] for e in mine] == ["queued", "running", "success", "success"]
    documented = spec["paths"]["/sessions/{session_id}/stream"]["get"]["responses"]["200"]
    schema = resolve(spec, documented["x-sse-events"]["subagent"])
    for event in mine:
        body = {k: v for k, v in event.items() if k != "event"}
        assert not schema_errors(spec, schema, body), (event, schema_errors(spec, schema, body))

    reply = iris.get("/sessions/w1/subagents")
    body = assert_documented(spec, "GET", "/sessions/{session_id}/subagents", reply, 200)
    [listed] = body["subagents"]
    assert listed["runId"] == accepted["runId"] and listed["label"] == "watched"
    assert listed["sessionKey"] == accepted["childSessionKey"]
    assert listed["status"] == "success" and listed["runtimeSeconds"] >= 0
    empty = iris.get("/sessions/nobody/subagents")
    assert assert_documented(spec, "GET", "/sessions/{session_id}/subagents", empty, 200) == {
        "sessionId": "nobody",
        "subagents": [],
    }
    bad = iris.get("/sessions/..bad/subagents")
    assert bad.status == 400


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded

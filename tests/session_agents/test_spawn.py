"""sessions_spawn through a served Iris: accepted at once, the child's own session, the
announce in the origin session with the normalised template."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer
from tests.session_agents.conftest import spawn, subagents, wait_for_announces
from tests.session_agents.model import CHILD_LINE, system_text

Serve = Callable[..., IrisServer]


def test_a_spawn_is_accepted_and_announced_once(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve()
    [accepted] = spawn(iris, "s1", {"task": "count the stars", "label": "stars"})
    assert accepted["status"] == "accepted"
    assert accepted["childSessionKey"].startswith("agent:main:subagent:")
    [announce] = wait_for_announces(iris, "s1", 1)
    text = announce["text"]
    assert text.splitlines()[0] == 'Sub-agent #1 "stars" (agent main) finished.'
    assert "Status: success" in text
    assert "Result: summary: count the stars" in text
    stats = text.splitlines()[-1]
    assert stats.startswith("Stats: runtime ")
    assert f"sessionKey {accepted['childSessionKey']}" in stats
    assert "tokens " in stats and " total" in stats
    [listed] = subagents(iris, "s1")
    assert listed["status"] == "success"
    assert listed["runId"] == accepted["runId"]
    assert f"transcript {listed['transcript']}" in stats
    child_requests = [r for r in llm.requests if CHILD_LINE in system_text(r["body"])]
    assert len(child_requests) == 2  # the task and the announce step

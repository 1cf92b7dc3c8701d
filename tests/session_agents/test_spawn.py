"""sessions_spawn through a served Iris: accepted at once, the child's own session, the
announce in the origin session with the normalised template."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer
from tests.session_agents.conftest import (
    announces,
    spawn,
    subagents,
    wait_for_announces,
    wait_for_status,
)
from tests.session_agents.model import CHILD_LINE, system_text, tool_results

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


def test_announce_skip_posts_nothing(serve: Serve) -> None:
    iris = serve()
    spawn(iris, "s2", {"task": "skip this one"}, {"task": "report this one"})
    [announce] = wait_for_announces(iris, "s2", 1)
    assert "report this one" in announce["text"]
    listed = wait_for_status(iris, "s2", {"success"})
    assert [s["status"] for s in listed] == ["success", "success"]
    assert len(announces(iris, "s2")) == 1


def test_the_child_gets_only_its_folders_instructions_and_no_session_tools(
    serve: Serve, llm: FakeAnthropic, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "CONSTITUTION.md").write_text("CONSTITUTION-MARKER")
    (data / "MEMORY.md").write_text("MEMORY-MARKER")
    (data / "AGENTS.md").write_text("AGENTS-MARKER")
    (data / "TOOLS.md").write_text("TOOLS-MARKER")
    iris = serve()
    spawn(iris, "s3", {"task": "look around"})
    wait_for_announces(iris, "s3", 1)
    [task_request] = [r["body"] for r in llm.requests if CHILD_LINE in system_text(r["body"])][:1]
    system = system_text(task_request)
    assert "AGENTS-MARKER" in system and "TOOLS-MARKER" in system
    assert "CONSTITUTION-MARKER" not in system and "MEMORY-MARKER" not in system
    names = {t["name"] for t in task_request["tools"]}
    assert "bash" in names
    assert not names & {"sessions_spawn", "sessions_list", "sessions_history", "sessions_send"}
    main_request = next(
        r["body"] for r in llm.requests if "CONSTITUTION-MARKER" in system_text(r["body"])
    )
    assert {"sessions_spawn", "agents_list"} <= {t["name"] for t in main_request["tools"]}


def test_a_sub_agent_cannot_spawn(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve()
    spawn(iris, "s4", {"task": "nest deeper"})
    wait_for_announces(iris, "s4", 1)
    told = [
        result
        for r in llm.requests
        if CHILD_LINE in system_text(r["body"])
        for result in tool_results(r["body"])
    ]
    assert told == ["sub-agents cannot spawn sub-agents or use the session tools (no nesting)"]
    assert len(subagents(iris, "s4")) == 1


def test_a_failed_child_is_announced_as_error(serve: Serve) -> None:
    iris = serve()
    spawn(iris, "s5", {"task": "fail please"})
    [announce] = wait_for_announces(iris, "s5", 1)
    assert "Status: error" in announce["text"]
    assert "Result: (not available)" in announce["text"]
    assert "the child's request was refused" in announce["text"]


def test_run_timeout_aborts_the_child_and_says_timeout(serve: Serve) -> None:
    iris = serve()
    spawn(iris, "s6", {"task": "slow work", "runTimeoutSeconds": 1})
    [announce] = wait_for_announces(iris, "s6", 1)
    assert "Status: timeout" in announce["text"]
    [listed] = subagents(iris, "s6")
    assert listed["status"] == "timeout" and not listed["archived"]


def test_the_ninth_child_waits_for_a_lane_slot_and_stop_cascades(serve: Serve) -> None:
    iris = serve()
    spawn(iris, "s7", *({"task": f"slow job {i}"} for i in range(9)))
    listed = wait_for_status(iris, "s7", {"running", "queued"}, count={"running": 8})
    assert sorted(s["status"] for s in listed) == ["queued"] + ["running"] * 8
    stopped = iris.post("/sessions/s7/stop", json_body={})
    assert stopped.status == 200 and stopped.json() == {"stopped": True}
    found = wait_for_announces(iris, "s7", 9)
    assert all("Status: error" in a["text"] and "stopped" in a["text"] for a in found)
    assert {s["status"] for s in subagents(iris, "s7")} == {"error"}

"""session-agents.json through a served Iris: models, thinking, allow-lists, tool policy, auth
profiles per agent id, and a bad file reported without stopping Iris."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer, clean_environment
from tests.session_agents import model
from tests.session_agents.conftest import call_tool, spawn, wait_for_announces
from tests.session_agents.model import CHILD_LINE, system_text

Serve = Callable[..., IrisServer]


def child_bodies(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests if CHILD_LINE in system_text(r["body"])]


def test_the_child_inherits_the_callers_model_unless_configured(
    serve: Serve, llm: FakeAnthropic
) -> None:
    iris = serve()
    spawn(iris, "m1", {"task": "inherit"})
    wait_for_announces(iris, "m1", 1)
    assert {b["model"] for b in child_bodies(llm)} == {"claude-sonnet-5-5"}
    assert "est. cost $" in wait_for_announces(iris, "m1", 1)[0]["text"]


def test_configured_explicit_and_invalid_models(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve({"agents": {"defaults": {"subagents": {"model": "claude-haiku-4-5"}}}})
    [default, explicit, invalid] = spawn(
        iris,
        "m2",
        {"task": "default model"},
        {"task": "explicit model", "model": "claude-opus-5-5"},
        {"task": "invalid model", "model": "gpt-nonsense"},
    )
    assert "warnings" not in default and "warnings" not in explicit
    assert invalid["status"] == "accepted"
    assert invalid["warnings"] == [
        "model 'gpt-nonsense' is not in the models table; the sub-agent runs on "
        "claude-haiku-4-5 instead"
    ]
    wait_for_announces(iris, "m2", 3)
    by_task = {model.task_of(b): b["model"] for b in child_bodies(llm)}
    assert by_task == {
        "default model": "claude-haiku-4-5",
        "explicit model": "claude-opus-5-5",
        "invalid model": "claude-haiku-4-5",
    }


def test_thinking_overrides_the_level(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve()
    spawn(iris, "t1", {"task": "think a little", "thinking": "low"}, {"task": "plain"})
    wait_for_announces(iris, "t1", 2)
    thinking = {model.task_of(b): b.get("thinking") for b in child_bodies(llm)}
    assert thinking == {
        "think a little": {"type": "enabled", "budget_tokens": 1024},
        "plain": None,
    }


def test_allow_lists_and_agents_list(serve: Serve, llm: FakeAnthropic) -> None:
    config = {
        "agents": {
            "list": [
                {"id": "main", "subagents": {"allowAgents": ["researcher"]}},
                {"id": "researcher"},
                {"id": "writer"},
            ]
        }
    }
    iris = serve(config)
    allowed, refused, unknown = spawn(
        iris,
        "a1",
        {"task": "research", "agentId": "researcher"},
        {"task": "write", "agentId": "writer"},
        {"task": "ghost", "agentId": "ghost"},
    )
    assert allowed["childSessionKey"].startswith("agent:researcher:subagent:")
    assert refused == {
        "status": "error",
        "error": "agentId 'writer' is not allowed for 'main' (allowed: main, researcher); "
        "see subagents.allowAgents",
    }
    assert unknown["status"] == "error" and "unknown agentId 'ghost'" in unknown["error"]
    wait_for_announces(iris, "a1", 1)
    listed = call_tool(iris, llm, "a1", "agents_list")
    assert [a["id"] for a in listed["agents"]] == ["main", "researcher"]


def test_star_allows_every_agent(serve: Serve, llm: FakeAnthropic) -> None:
    config = {
        "agents": {"list": [{"id": "main", "subagents": {"allowAgents": ["*"]}}, {"id": "writer"}]}
    }
    iris = serve(config)
    [accepted] = spawn(iris, "a2", {"task": "write", "agentId": "writer"})
    assert accepted["status"] == "accepted"
    listed = call_tool(iris, llm, "a2", "agents_list")
    assert [a["id"] for a in listed["agents"]] == ["main", "writer"]


def test_tool_policy_deny_wins_and_allow_is_allow_only(serve: Serve, llm: FakeAnthropic) -> None:
    config = {
        "agents": {
            "list": [
                {"id": "main", "subagents": {"allowAgents": ["*"]}},
                {"id": "reader", "tools": {"allow": ["read", "bash"], "deny": ["bash"]}},
            ]
        },
        "tools": {"subagents": {"tools": {"deny": ["write"]}}},
    }
    iris = serve(config)
    spawn(iris, "p1", {"task": "as main"}, {"task": "as reader", "agentId": "reader"})
    wait_for_announces(iris, "p1", 2)
    tools = {model.task_of(b): {t["name"] for t in b["tools"]} for b in child_bodies(llm)}
    assert "write" not in tools["as main"] and {"bash", "read", "edit"} <= tools["as main"]
    assert tools["as reader"] == {"read"}


def test_an_agent_runs_on_its_own_key(serve: Serve, llm: FakeAnthropic, tmp_path: Path) -> None:
    with FakeAnthropic(api_key="researcher-key") as own:
        own.respond_with(model.respond)
        folder = tmp_path / "data" / "session-agents" / "researcher"
        folder.mkdir(parents=True)
        profiles = folder / "auth-profiles.json"
        profiles.write_text(
            json.dumps({"anthropic": {"apiKey": "researcher-key", "baseUrl": own.base_url}})
        )
        profiles.chmod(0o600)
        (folder / "AGENTS.md").write_text("RESEARCHER-INSTRUCTIONS")
        config = {
            "agents": {
                "list": [
                    {"id": "main", "subagents": {"allowAgents": ["researcher"]}},
                    {"id": "researcher"},
                ]
            }
        }
        iris = serve(config)
        spawn(iris, "k1", {"task": "own key", "agentId": "researcher"}, {"task": "main key"})
        wait_for_announces(iris, "k1", 2)
        [mine] = {model.task_of(b) for b in child_bodies(own)}
        assert mine == "own key"
        assert {r["headers"]["authorization"] for r in own.requests} == {"Bearer researcher-key"}
        assert "RESEARCHER-INSTRUCTIONS" in system_text(child_bodies(own)[0])
        assert {model.task_of(b) for b in child_bodies(llm)} == {"main key"}
        profiles.chmod(0o644)
        [refused] = spawn(iris, "k1", {"task": "again", "agentId": "researcher"})
        assert refused["status"] == "error"
        assert "must be a private file (chmod 600)" in refused["error"]
        assert "researcher-key" not in refused["error"]


def test_a_bad_file_is_reported_and_iris_runs_on_the_defaults(serve: Serve, tmp_path: Path) -> None:
    bad = {"agents": {"list": [{"id": "researcher", "modle": "x"}]}}
    iris = serve(bad)
    [refused] = spawn(iris, "b1", {"task": "x", "agentId": "researcher"})
    assert "unknown agentId 'researcher'" in refused["error"]
    [accepted] = spawn(iris, "b1", {"task": "still works"})
    assert accepted["status"] == "accepted"
    assert "agents.list[0]: unknown key(s) modle" in (iris.log_tail(200))
    doctor = subprocess.run(
        [sys.executable, "-m", "iris_runtime", "doctor", "--json"],
        env=clean_environment(IRIS_DATA_DIR=str(tmp_path / "data")),
        capture_output=True,
        text=True,
        check=False,
    )
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["session_agents"]["status"] == "fail"
    assert "agents.list[0]: unknown key(s) modle" in checks["session_agents"]["detail"]

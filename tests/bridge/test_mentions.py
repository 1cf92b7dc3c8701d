"""Leading @mentions and what Iris's prompt says about her sub-agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.bridge.mentions import parse_agent_mention
from iris_runtime.bridge.routing import AgentMentionRouter
from iris_runtime.config import Settings
from iris_runtime.engine.sessions import SessionStore

AGENTS = {"helper", "digest-bot"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@helper do the thing", ("helper", "do the thing")),
        ("   @helper, please", ("helper", "please")),
        ("@Helper: caps are fine", ("helper", "caps are fine")),
        ("@digest-bot", ("digest-bot", "")),
        ("@helper\nmulti\nline", ("helper", "multi\nline")),
    ],
)
def test_leading_mentions_of_known_agents_route(text: str, expected: tuple[str, str]) -> None:
    assert parse_agent_mention(text, AGENTS) == expected


@pytest.mark.parametrize(
    "text", ["ask @helper later", "@nobody hi", "@helpers plural", "email@helper.com", "", "@"]
)
def test_everything_else_falls_through(text: str) -> None:
    assert parse_agent_mention(text, AGENTS) is None


def test_the_prompt_lists_registered_agents_and_says_nothing_without_them(tmp_path: Path) -> None:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path)})
    registry = AgentRegistry(tmp_path / "agents.json")
    router = AgentMentionRouter(settings, registry, SessionStore(tmp_path))
    assert router.prompt_section() == ""
    registry.register("helper", "http://127.0.0.1:4000")
    registry.register("digest", "http://127.0.0.1:4001")
    section = router.prompt_section()
    assert "digest, helper" in section and "call_agent" in section


def test_a_corrupt_registry_disables_routing_without_breaking_runs(tmp_path: Path) -> None:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path)})
    (tmp_path / "agents.json").write_text("{broken")
    router = AgentMentionRouter(
        settings, AgentRegistry(tmp_path / "agents.json"), SessionStore(tmp_path)
    )
    assert router.prompt_section() == ""
    assert (tmp_path / "agents.json").read_text() == "{broken"

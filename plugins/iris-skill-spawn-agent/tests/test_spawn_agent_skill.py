"""The spawn-agent skill through a served Iris: the skill is in Iris's prompt, and Iris's model,
following it, spawns a sub-agent with its bash tool; the new agent then answers ``@name``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from iris_skill_spawn_agent.plugin import SKILL_DIR

import iris_runtime
from iris_runtime.engine.skills import load_skill
from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer

pytestmark = pytest.mark.slow

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]


def test_the_skill_describes_the_command() -> None:
    skill = load_skill(SKILL_DIR)
    assert skill is not None and skill.name == "spawn-agent"
    assert skill.secrets == ()  # spawning needs Iris's own data dir, no secret of its own
    text = (SKILL_DIR / "SKILL.md").read_text()
    for command in ("iris agents spawn", "iris agents list", "iris agents remove", "IRIS_REPO_DIR"):
        assert command in text


def test_a_served_iris_lists_the_skill_in_its_system_prompt(
    start_iris: Callable[..., IrisServer], fake_anthropic: FakeAnthropic
) -> None:
    iris = start_iris(**fake_anthropic.iris_env())
    assert iris.post("/sessions/skills/message", json_body={"text": "hi"}).status == 200
    assert "- spawn-agent: Create a new sub-agent" in fake_anthropic.system_text()


def test_iris_spawns_an_agent_with_its_bash_tool(
    start_iris: Callable[..., IrisServer], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    spawn = (
        'cd "${IRIS_REPO_DIR:-/iris/repo}" && iris agents spawn scout --json > '
        f"{tmp_path}/spawned.json"
    )
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "when": "make a scout",
                        "turns": [
                            [{"tool": "bash", "args": {"command": spawn}}],
                            [{"text": "scout is ready"}],
                        ],
                    },
                    {"when": "report", "turns": [[{"text": "scout reporting"}]]},
                ]
            }
        )
    )
    iris = start_iris(
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS="24600-24649",
        IRIS_SERVICE_MANAGER="process",
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    reply = iris.post("/sessions/chat/message", json_body={"text": "please make a scout"})
    assert reply.json()["text"] == "scout is ready"
    spawned = json.loads((tmp_path / "spawned.json").read_text())
    assert spawned["name"] == "scout" and spawned["manager"] == "process"

    answer = iris.post("/sessions/chat2/message", json_body={"text": "@scout report"})
    assert answer.json()["text"] == "scout reporting"
    log = (iris.data_dir / "SESSION-chat2" / "log.jsonl").read_text()
    assert '"bridge_call"' in log

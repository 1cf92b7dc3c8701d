"""``iris agents spawn --sandbox``: the agent's own bash runs at the level it was given (its own
``iris serve`` proves it at start-up), and the record keeps the level for ``iris agents ensure``."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.provisioning.test_spawn_process import REPO_DIR, iris_cli, port_range
from tests.sandbox.support import require_tools

pytestmark = pytest.mark.slow

RULES = [
    {
        "when": "where are you",
        "turns": [
            [{"tool": "bash", "args": {"command": "id -u > uid.txt; pwd > pwd.txt"}}],
            [{"text": "in my box"}],
        ],
    },
]


@pytest.fixture
def iris(start_iris: Callable[..., IrisServer], tmp_path: Path) -> IrisServer:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": RULES}))
    return start_iris(
        tmp_path / "iris",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS=port_range(),
        IRIS_SERVICE_MANAGER="process",
        ANTHROPIC_API_KEY="sk-parent-" + secrets.token_hex(8),
    )


def test_a_spawned_agent_runs_its_commands_at_its_level(iris: IrisServer) -> None:
    # namespace refuses to run as root (the agent runs as Iris's user); gVisor runs as root.
    level = "gvisor:ptrace" if os.geteuid() == 0 else "namespace"
    require_tools("runsc" if os.geteuid() == 0 else "bwrap")
    done = iris_cli(iris, "agents", "spawn", "boxed", "--sandbox", level, "--json")
    assert done.returncode == 0, done.stderr
    home = Path(json.loads(done.stdout)["home"])
    reply = iris.post("/sessions/s1/message", json_body={"text": "@boxed where are you"})
    assert reply.json()["text"] == "in my box", reply.body
    assert (home / "work" / "uid.txt").read_text().strip() == "10000"
    assert (home / "work" / "pwd.txt").read_text().strip() == "/workspace"
    record = json.loads((home.parent / ".records" / "boxed.json").read_text())
    assert record["sandbox"] == level
    # The same declaration is unchanged; another level is a difference that replaces it.
    same = iris_cli(iris, "agents", "ensure", "boxed", "--sandbox", level, "--check")
    assert same.stdout.strip() == "boxed: unchanged", same.stderr
    other = iris_cli(iris, "agents", "ensure", "boxed", "--sandbox", "host", "--check", "--json")
    assert f"sandbox: {level} -> host" in json.loads(other.stdout)["differences"]
    iris_cli(iris, "agents", "remove", "boxed")


def test_an_unknown_level_is_refused_before_anything_is_made(iris: IrisServer) -> None:
    done = iris_cli(iris, "agents", "spawn", "boxed", "--sandbox", "nosuch")
    assert done.returncode != 0
    assert "'nosuch' is not installed" in done.stderr


@pytest.mark.parametrize("level", ["namespace", "gvisor", "docker:box", "firecracker"])
def test_a_docker_agent_refuses_levels_its_container_stops(iris: IrisServer, level: str) -> None:
    done = iris_cli(iris, "agents", "spawn", "boxed", "--mode", "docker", "--sandbox", level)
    assert done.returncode != 0
    assert f"--sandbox {level}: a Docker agent runs in a container of its own" in done.stderr
    assert "boxed" not in iris_cli(iris, "agents", "list").stdout

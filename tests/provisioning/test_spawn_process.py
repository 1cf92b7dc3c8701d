"""``iris agents spawn`` in process mode, end to end: a real Iris supervises the new agent, which
answers ``@name`` through the bridge, reads its skill's secret on first use, survives ``kill -9``
and is removed cleanly.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

import iris_runtime
from iris_runtime.agents.ports import can_bind
from iris_runtime.provision.process_service import ProcessService
from iris_runtime.testing.server import IrisServer, clean_environment
from tests.provisioning.waiting import wait_for

pytestmark = pytest.mark.slow

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
SECRET_VALUE = "digest-" + secrets.token_hex(16)
OTHER_VALUE = "other-" + secrets.token_hex(16)
SKILL_MD = """---
name: digest-feeds
description: Summarise the feeds (needs the feed service's key).
secrets: [DIGEST_KEY]
---
Run `get-secret DIGEST_KEY` to call the feed service.
"""
AGENT_RULES = [
    {
        "when": "read your secret",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": "get-secret --no-newline DIGEST_KEY | sha256sum | "
                        "cut -d' ' -f1 > secret.sha; "
                        "get-secret OTHER_KEY > /dev/null 2>&1; echo $? > other.rc"
                    },
                }
            ],
            [{"text": "done reading"}],
        ],
    },
    {"when": "who are you", "turns": [[{"text": "digest here"}]]},
]

StartIris = Callable[..., IrisServer]


def healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def port_range() -> str:
    first = random.randrange(20000, 30000, 200)
    return f"{first}-{first + 49}"


@pytest.fixture
def iris(start_iris: StartIris, tmp_path: Path) -> IrisServer:
    data = tmp_path / "iris"
    skill = data / "skills" / "digest-feeds"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": AGENT_RULES}))
    return start_iris(
        data,
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS=port_range(),
        IRIS_SERVICE_MANAGER="process",
        IRIS_SUPERVISOR_BACKOFF_MS="200",
        ANTHROPIC_API_KEY="sk-parent-" + secrets.token_hex(8),
    )


def cli_env(iris: IrisServer) -> dict[str, str]:
    """The environment Iris runs with: the CLI must see the same configuration."""
    keep = ("IRIS_", "ANTHROPIC_API_KEY")
    return clean_environment(
        **{k: v for k, v in iris.environment().items() if k.startswith(keep)},
    )


def iris_cli(
    iris: IrisServer, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iris_runtime", *args],
        env=cli_env(iris),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def spawn(iris: IrisServer, *args: str) -> dict[str, Any]:
    done = iris_cli(iris, "agents", "spawn", *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_spawn_answer_survive_kill_and_remove(iris: IrisServer) -> None:
    for name, value in (("DIGEST_KEY", SECRET_VALUE), ("OTHER_KEY", OTHER_VALUE)):
        assert iris_cli(iris, "secrets", "set", name, stdin=value).returncode == 0

    done = iris_cli(
        iris,
        "agents",
        "spawn",
        "digest",
        "--skill",
        "digest-feeds",
        "--skill",
        "get-secret",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)
    # Progress is shown step by step, on stderr.
    for step in (
        "registered digest",
        "created home",
        "waiting for",
        "bridge round trip",
        "is ready",
    ):
        assert step in done.stderr
    assert agent["manager"] == "process"
    assert agent["secrets"] == ["DIGEST_KEY"]  # the union of the skills' declared secrets
    assert agent["token"].startswith("****")  # masked
    home = Path(agent["home"])
    assert sorted(p.name for p in (home / "skills").iterdir()) == ["digest-feeds", "get-secret"]
    assert "digest" in (home / "CONSTITUTION.md").read_text()
    assert "{{" not in (home / "CONSTITUTION.md").read_text()
    assert (home / "api-token").stat().st_mode & 0o777 == 0o600

    listed = json.loads(iris_cli(iris, "agents", "list", "--json").stdout)
    assert listed[0]["name"] == "digest"
    assert listed[0]["run"] == {"manager": "process", "state": "running", "restarts": 0}

    # @digest is answered at once, through the bridge, and the skill's secret works on first use.
    reply = iris.post("/sessions/s1/message", json_body={"text": "@digest read your secret"})
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "done reading"
    assert (home / "secret.sha").read_text().strip() == hashlib.sha256(
        SECRET_VALUE.encode()
    ).hexdigest()
    assert (home / "other.rc").read_text().strip() == "3"  # not on its allow-list: refused

    # The agent's process holds none of Iris's secrets.
    service = ProcessService(iris.data_dir)
    first = service.status("digest")
    assert first is not None and first.pid
    environ = Path(f"/proc/{first.pid}/environ").read_bytes()
    assert b"sk-parent-" not in environ and b"ANTHROPIC_API_KEY" not in environ
    assert iris.token.encode() not in environ

    # kill -9: the supervisor starts it again.
    api_port = agent["api_port"]
    os.kill(first.pid, signal.SIGKILL)
    wait_for(
        lambda: (s := service.status("digest")) and s.pid != first.pid and healthy(api_port),
        "the agent to be restarted",
        timeout=60,
    )
    again = iris.post("/sessions/s2/message", json_body={"text": "@digest who are you"})
    assert again.json()["text"] == "digest here"

    done = iris_cli(iris, "agents", "remove", "digest")
    assert done.returncode == 0, done.stderr
    assert "digest" not in json.loads((iris.data_dir / "agents.json").read_text())
    assert service.status("digest") is None
    bridge_port = api_port - 100
    wait_for(lambda: can_bind(bridge_port) and can_bind(api_port), "the ports to be free", 30)
    assert not home.exists()
    assert [p.name.split("-")[0] for p in (home.parent / ".removed").iterdir()] == ["digest"]
    # @digest is no longer routed to a sub-agent: Iris's own model answers.
    iris.post("/sessions/s3/message", json_body={"text": "@digest who are you"})
    log = (iris.data_dir / "SESSION-s3" / "log.jsonl").read_text()
    assert "bridge_call" not in log


def test_an_agent_that_never_becomes_healthy_is_rolled_back(iris: IrisServer) -> None:
    # An invalid setting makes `iris serve` exit at once, every time it is restarted.
    done = iris_cli(iris, "agents", "spawn", "broken", "--env", "IRIS_LOG_LEVEL=shouty")
    assert done.returncode != 0
    assert "IRIS_LOG_LEVEL" in done.stderr  # the agent's own error, from its log
    assert "rolled back" in done.stderr
    entries = (
        json.loads((iris.data_dir / "agents.json").read_text())
        if (iris.data_dir / "agents.json").exists()
        else {}
    )
    assert "broken" not in entries
    assert ProcessService(iris.data_dir).status("broken") is None
    assert not (iris.data_dir / "agents" / "broken").exists()


def test_twenty_concurrent_spawns_get_twenty_entries_and_distinct_ports(iris: IrisServer) -> None:
    names = [f"crowd-{i:02d}" for i in range(20)]
    env = cli_env(iris)
    spawns = [
        subprocess.Popen(
            [sys.executable, "-m", "iris_runtime", "agents", "spawn", name, "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    results = []
    for process in spawns:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    entries = json.loads((iris.data_dir / "agents.json").read_text())
    assert sorted(entries) == names
    ports = {entry["bridge_url"] for entry in entries.values()}
    assert len(ports) == 20
    assert all(healthy(result["api_port"]) for result in results)

    removals = [
        subprocess.Popen(
            [sys.executable, "-m", "iris_runtime", "agents", "remove", name, "--purge"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    for process in removals:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    assert json.loads((iris.data_dir / "agents.json").read_text()) == {}
    assert ProcessService(iris.data_dir).processes() == []


def test_sigterm_mid_spawn_rolls_everything_back(iris: IrisServer) -> None:
    spawn = subprocess.Popen(
        [sys.executable, "-m", "iris_runtime", "agents", "spawn", "brief"],
        env=cli_env(iris),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert spawn.stderr is not None
    seen = []
    for line in spawn.stderr:  # stop it once it has changed something
        seen.append(line)
        if "registered brief" in line:
            spawn.send_signal(signal.SIGTERM)
            break
    rest = spawn.stderr.read()
    assert spawn.wait(timeout=120) != 0
    assert "rolled back: unregistered brief" in "".join(seen) + rest
    assert "brief" not in json.loads((iris.data_dir / "agents.json").read_text())
    assert ProcessService(iris.data_dir).status("brief") is None
    assert not (iris.data_dir / "agents" / "brief").exists()


def test_an_unregistered_but_running_agent_is_never_taken_over(iris: IrisServer) -> None:
    agent = spawn(iris, "ghost")
    done = iris_cli(iris, "agents", "unregister", "ghost")  # by hand: the process keeps running
    assert done.returncode == 0, done.stderr
    before = ProcessService(iris.data_dir).status("ghost")
    assert before is not None and before.pid

    done = iris_cli(iris, "agents", "spawn", "ghost")
    assert done.returncode != 0
    assert "already has an agent named 'ghost'" in done.stderr
    after = ProcessService(iris.data_dir).status("ghost")
    assert after is not None and after.pid == before.pid  # untouched, not rolled back
    assert healthy(agent["api_port"])

    done = iris_cli(iris, "agents", "remove", "ghost", "--purge")
    assert done.returncode == 0, done.stderr
    assert ProcessService(iris.data_dir).status("ghost") is None

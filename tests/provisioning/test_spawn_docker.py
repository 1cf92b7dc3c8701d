"""``iris agents spawn --mode docker`` end to end: a real Iris, the real terraform and a private
dockerd. The container is registered with the module's own token in the same step, answers
``@name`` through the bridge, reads exactly its allow-listed secret through Iris's broker, gets none
of Iris's platform tokens, and ``iris agents remove`` takes it all away."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.provision.docker_cli import container_state, inspect_container
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.provisioning.dockerd import (  # noqa: F401  (fixtures)
    Dockerd,
    docker_base_image,
    docker_repo,
    dockerd,
)
from tests.provisioning.rootfs import debian_rootfs, require_root_and  # noqa: F401

# The first test to need them builds the Debian rootfs and the runtime image.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SKILL_MD = """---
name: feeds
description: Reads the feed service.
secrets: [FEED_KEY]
---
"""
PARENT_TELEGRAM = "123456:parent-telegram-token-value"


@pytest.fixture
def iris(
    start_iris: Callable[..., IrisServer],
    tmp_path: Path,
    dockerd: Dockerd,  # noqa: F811
    docker_base_image: str,  # noqa: F811
    docker_repo: Path,  # noqa: F811
) -> IrisServer:
    require_root_and("dockerd", "docker", "debootstrap", "terraform")
    data = tmp_path / "iris"
    (data / "skills" / "feeds").mkdir(parents=True)
    (data / "skills" / "feeds" / "SKILL.md").write_text(SKILL_MD)
    first = random.randrange(40000, 48000, 100)
    return start_iris(
        data,
        IRIS_REPO_DIR=str(docker_repo),
        IRIS_AGENT_PORTS=f"{first}-{first + 49}",
        IRIS_DOCKER_BASE_IMAGE=docker_base_image,
        IRIS_DOCKER_IMAGE="iris-runtime:spawn-test",
        DOCKER_HOST=dockerd.host,
        TELEGRAM_BOT_TOKEN=PARENT_TELEGRAM,
    )


def iris_cli(
    iris: IrisServer, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = clean_environment(
        **{k: v for k, v in iris.environment().items() if k.startswith(("IRIS_", "DOCKER_HOST"))}
    )
    return run_iris(*args, env=env, stdin=stdin, timeout=600)


def docker(dockerd: Dockerd, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return subprocess.run(
        ["docker", *args],
        env={**os.environ, "DOCKER_HOST": dockerd.host},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_docker_spawn_registers_answers_reads_its_secret_and_is_removed(
    iris: IrisServer,
    dockerd: Dockerd,  # noqa: F811
) -> None:
    for name, value in (("FEED_KEY", "feed-value-1234"), ("OTHER_KEY", "other-value-5678")):
        assert iris_cli(iris, "secrets", "set", name, stdin=value).returncode == 0

    done = iris_cli(
        iris, "agents", "spawn", "boxed", "--mode", "docker", "--skill", "feeds", "--json"
    )
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)
    assert agent["manager"] == "docker"
    assert agent["secrets"] == ["FEED_KEY"]
    assert agent["token"].startswith("****")  # its own token, from the module, registered
    assert "terraform" in done.stderr.lower()  # Terraform's progress was shown
    assert "scaffold commit skipped: no GitHub token configured" in done.stderr

    # The container answers @boxed through the bridge (offline provider: it echoes).
    reply = iris.post("/sessions/d1/message", json_body={"text": "@boxed are you there"})
    assert reply.status == 200, reply.body
    assert "You said: are you there" in reply.json()["text"]
    assert '"bridge_call"' in (iris.data_dir / "SESSION-d1" / "log.jsonl").read_text()

    # Its token reads its allow-listed secret through Iris's broker, and nothing else.
    container = "iris-agent-boxed"
    got = docker(dockerd, "exec", container, "get-secret", "--no-newline", "FEED_KEY")
    assert (got.returncode, got.stdout) == (0, "feed-value-1234"), got.stderr
    denied = docker(dockerd, "exec", container, "get-secret", "OTHER_KEY")
    assert denied.returncode == 3 and "other-value" not in denied.stdout + denied.stderr

    # Store mode: identity and broker only; Iris's platform tokens set empty.
    env = dict(item.split("=", 1) for item in inspect_container(container)["Config"]["Env"])
    assert env["IRIS_SECRET_BROKER_URL"] == f"http://127.0.0.1:{iris.port}"
    assert env["TELEGRAM_BOT_TOKEN"] == "" and env["IRIS_SLACK_BOT_TOKEN"] == ""
    assert PARENT_TELEGRAM not in json.dumps(inspect_container(container))

    listed = json.loads(iris_cli(iris, "agents", "list", "--json").stdout)
    assert listed[0]["run"] == {"manager": "docker", "state": "running"}

    done = iris_cli(iris, "agents", "remove", "boxed")
    assert done.returncode == 0, done.stderr
    assert container_state(container) is None
    assert "boxed" not in json.loads((iris.data_dir / "agents.json").read_text())

"""The Docker-mode agents the tests install: their launches, the parent's planted secrets, and
how a test reaches an installed agent (its health, its API)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.docker_cli import container_state
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch

IMAGE = "iris-runtime:test"
ROLL_IMAGE = "iris-runtime:roll-test"
LONGEST_NAME = "9_lives-" + "x" * 55  # 63 characters: the registry's longest name
PARENT_SECRETS = {
    "TELEGRAM_BOT_TOKEN": "parent-telegram-" + uuid.uuid4().hex,
    "IRIS_SLACK_BOT_TOKEN": "xoxb-parent-" + uuid.uuid4().hex,
    "IRIS_SLACK_APP_TOKEN": "xapp-parent-" + uuid.uuid4().hex,
    "IRIS_API_TOKEN": "shared-" + uuid.uuid4().hex,
}
START_TIMEOUT = 90.0


def free_bridge_port() -> int:
    """A bridge port whose API port (+100) is free too; containers share the host network."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 100 > 65535:
            continue
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 100))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def wait_healthy(launch: AgentLaunch) -> dict[str, object]:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            status, body = get(launch.health_url)
            if status == 200:
                return body
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            state = container_state(f"iris-agent-{launch.name}")
            raise AssertionError(f"{launch.name} never became healthy (container: {state})")
        time.sleep(0.3)


def make_launch(home_root: Path, name: str, mode: str, broker: str) -> AgentLaunch:
    home = home_root / name
    home.mkdir(parents=True, mode=0o700)
    bridge = free_bridge_port()
    environment = {
        "AGENT_NAME": name,
        "BRIDGE_PORT": str(bridge),
        "IRIS_API_PORT": str(bridge + 100),
        "IRIS_API_HOST": "127.0.0.1",
        "IRIS_DATA_DIR": str(home),
        "IRIS_SECRETS_MODE": mode,
        "IRIS_SECRET_BROKER_URL": broker,
        "IRIS_PROVIDER": "offline",
        "IRIS_LOG_LEVEL": "warning",
        **dict.fromkeys(PLATFORM_TOKEN_VARS, ""),
    }
    return AgentLaunch(
        name=name,
        home=home,
        bridge_port=bridge,
        api_port=bridge + 100,
        command=("iris", "serve"),
        environment=environment,
    )


@dataclass
class Installed:
    agents: DockerAgents
    launch: AgentLaunch
    token: str | None
    progress: list[str]
    argv: set[str]  # every process's command line (as `ps` shows it) while it installed
    env_file: Path

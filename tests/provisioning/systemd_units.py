"""``SystemdService`` driving a booted container's systemd (the ``nspawn_host`` fixture): the
``service`` fixture, launches of the real ``iris serve`` as a sub-agent, and what the tests read
back from systemd and from the agent's process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.agents.ports import can_bind
from iris_runtime.provision.launch import AgentLaunch, no_progress
from iris_runtime.provision.systemd import DEFAULT_AGENT_USER, SystemdService
from iris_runtime.testing.polling import poll
from tests.provisioning.nspawn import NspawnHost

REPO = Path(__file__).resolve().parents[2]
UNIT_DIR = "/etc/systemd/system"
DATA = Path("/var/lib/iris")  # Iris's data dir inside the container, hidden from agents
AGENTS_DIR = DATA / "agents"
SECRETS = DATA / "secrets"  # the parent's secret store
ENV_FILE = Path("/etc/iris/iris.env")  # a protected file outside the data dir
TOKEN = "tok-5b0e8d1f6a2c4e7f9d3b1a0c8e6f4d2b"


@pytest.fixture
def service(nspawn_host: NspawnHost) -> Iterator[SystemdService]:
    """SystemdService driving the container's systemd; removes what a test left installed."""
    systemd = SystemdService(
        REPO,
        nspawn_host.path(UNIT_DIR),
        nspawn_host.command("systemctl"),
        journalctl=nspawn_host.command("journalctl"),
        on_target=nspawn_host.command(),
        root=nspawn_host.root,
    )
    yield systemd
    for unit in nspawn_host.path(UNIT_DIR).glob("iris-agent-*.service"):
        systemd.remove(unit.name.removeprefix("iris-agent-").removesuffix(".service"), no_progress)


def free_ports() -> tuple[int, int]:
    """A bridge port and its API port (+100), both free on the shared network."""
    for _ in range(200):
        bridge = random.randrange(30000, 39000)
        if can_bind(bridge) and can_bind(bridge + 100):
            return bridge, bridge + 100
    raise RuntimeError("no free port pair")


def make_home(host: NspawnHost, name: str) -> Path:
    """An agent home inside the container, with its API token file."""
    home = AGENTS_DIR / name
    on_host = host.path(home)
    on_host.mkdir(parents=True, mode=0o700, exist_ok=True)
    token = on_host / "api-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return home


def agent_launch(host: NspawnHost, name: str, **changes: Any) -> AgentLaunch:
    bridge, api = free_ports()
    home = make_home(host, name)
    values: dict[str, Any] = {
        "name": name,
        "home": home,
        "bridge_port": bridge,
        "api_port": api,
        "command": (sys.executable, "-m", "iris_runtime", "serve"),
        "environment": {
            "AGENT_NAME": name,
            "BRIDGE_PORT": str(bridge),
            "IRIS_API_PORT": str(api),
            "IRIS_API_HOST": "127.0.0.1",
            "IRIS_DATA_DIR": str(home),
            "IRIS_SECRETS_MODE": "store",
            "IRIS_SECRET_BROKER_URL": "http://127.0.0.1:9",
            "IRIS_PROVIDER": "offline",
            "IRIS_SLACK_APP_TOKEN": "",
            "IRIS_SLACK_BOT_TOKEN": "",
            "TELEGRAM_BOT_TOKEN": "",
        },
        # As spawn passes them: Iris's data dir and the agents dir whole, single files outside.
        "protected_paths": (DATA, AGENTS_DIR, ENV_FILE),
    }
    values.update(changes)
    return AgentLaunch(**values)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    if not poll(condition, timeout, interval=0.1):
        raise AssertionError(f"gave up waiting for {what}")


def get(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def healthy(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except (OSError, ValueError):
        return False


def show(host: NspawnHost, unit: str, prop: str) -> str:
    return host.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def agent_ids(host: NspawnHost, name: str = "digest") -> tuple[int, int]:
    """The uid and gid of the agent's own user inside the container."""
    user = f"{DEFAULT_AGENT_USER}-{name}"
    entry = host.run("getent", "passwd", user, check=True).stdout.split(":")
    return int(entry[2]), int(entry[3])


def process_status(host: NspawnHost, pid: str) -> dict[str, str]:
    text = host.run("cat", f"/proc/{pid}/status", check=True).stdout
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


def replace_atomically(path: Path, text: str) -> None:
    """How Iris rewrites agents.json: a new file renamed over the old one."""
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    scratch.chmod(0o644)
    os.replace(scratch, path)


def read_as_agent(host: NspawnHost, pid: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`cat path` as the agent user, in the mount namespace of the agent's process."""
    uid, gid = agent_ids(host)
    return host.run("nsenter", "-t", pid, "-m", "-S", str(uid), "-G", str(gid), "cat", str(path))

"""Supervised agents in process mode, for the supervisor's end-to-end tests: how to launch one
(an ``iris serve`` sub-agent, or a small stand-in that is not Iris), and how to watch it (its
row in ``state.db``, its process, its ports, its ``/health``, its log).

The supervising Iris runs with a short first backoff (``IRIS_SUPERVISOR_BACKOFF_MS``) so the
crash tests do not wait a second per restart; everything else is the production path.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from iris_runtime.agents.ports import can_bind
from iris_runtime.provision.launch import AgentLaunch
from iris_runtime.provision.process_service import ProcessService
from iris_runtime.provision.supervised import SupervisedProcess, SupervisedStore
from iris_runtime.testing.server import IrisServer, free_port

PARENT_SECRET = "sk-parent-" + uuid.uuid4().hex  # must never reach an agent's environment
IRIS_ENV = {"IRIS_SUPERVISOR_BACKOFF_MS": "100", "ANTHROPIC_API_KEY": PARENT_SECRET}
WAIT = 30.0  # generous bound for things that happen in well under a second or two

StartIris = Callable[..., IrisServer]

# Agents that are not Iris: quick to start, and one that ignores SIGTERM (it says so in its log).
STUBBORN = (
    sys.executable,
    "-c",
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('got SIGTERM, ignoring it', flush=True))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(1)\n",
)
SLEEPER = (sys.executable, "-c", "import time\nwhile True:\n    time.sleep(1)\n")
# A parent with a child of its own in its process group (both go with the group).
FAMILY = (
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(1)\n",
)


def agent_launch(
    tmp_path: Path, name: str = "digest", command: tuple[str, ...] | None = None
) -> AgentLaunch:
    bridge_port, api_port = free_port(), free_port()
    home = tmp_path / "agents" / name
    home.mkdir(parents=True, exist_ok=True)
    return AgentLaunch(
        name=name,
        home=home,
        bridge_port=bridge_port,
        api_port=api_port,
        command=command or (sys.executable, "-m", "iris_runtime", "serve"),
        environment={
            "AGENT_NAME": name,
            "BRIDGE_PORT": str(bridge_port),
            "IRIS_API_PORT": str(api_port),
            "IRIS_API_HOST": "127.0.0.1",
            "IRIS_DATA_DIR": str(home),
            "IRIS_PROVIDER": "offline",
            "IRIS_SLACK_APP_TOKEN": "",
            "IRIS_SLACK_BOT_TOKEN": "",
            "TELEGRAM_BOT_TOKEN": "",
        },
    )


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout}s for: {what}")
        time.sleep(0.05)


def http_get(url: str, token: str | None = None) -> tuple[int, bytes] | None:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # loopback only
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return None


def healthy(launch: AgentLaunch) -> bool:
    reply = http_get(launch.health_url)
    return reply is not None and reply[0] == 200


def port_free(port: int) -> bool:
    """A new listener can bind it (with SO_REUSEADDR, as gunicorn does: connections of ours
    left in TIME_WAIT do not count)."""
    return can_bind(port)


def alive(pid: int) -> bool:
    """Exists and is not a zombie (an unreaped zombie holds no port and runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def row(data_dir: Path, name: str = "digest") -> SupervisedProcess | None:
    with SupervisedStore(data_dir) as store:
        return store.get(name)


def running_pid(data_dir: Path, name: str = "digest") -> int:
    current = row(data_dir, name)
    assert current is not None and current.state == "running" and current.pid is not None
    return current.pid


def kill_iris_hard(iris: IrisServer) -> None:
    """``kill -9`` of Iris: its gunicorn master and its worker (which runs the supervisor and
    whose pid the heartbeat names). Both are frozen first, so neither reacts to the other's
    death (a master respawns workers; a worker whose master dies stops its runtime)."""
    assert iris.process is not None
    with SupervisedStore(iris.data_dir) as store:
        beat = store.supervisor()
    assert beat is not None
    for pid in (iris.process.pid, beat.pid):
        os.kill(pid, signal.SIGSTOP)
    for pid in (beat.pid, iris.process.pid):
        os.kill(pid, signal.SIGKILL)
    iris.process.wait()
    wait_for(lambda: not alive(beat.pid), "the killed worker to be gone")


def log_says(launch: AgentLaunch, text: str) -> bool:
    try:
        return text in (launch.home / "logs" / "agent.log").read_text()
    except OSError:
        return False


def remove_in_background(
    service: ProcessService, name: str, lines: list[str], outcome: list[bool]
) -> threading.Thread:
    """``iris agents remove NAME`` running concurrently (it waits for the supervisor)."""
    remover = threading.Thread(target=lambda: outcome.append(service.remove(name, lines.append)))
    remover.start()
    return remover

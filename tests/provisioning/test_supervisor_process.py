"""Process mode end to end: a real ``iris serve`` supervises a real sub-agent (``iris serve``
too), driven from this process through :class:`ProcessService` exactly as the CLI drives it.

The supervising Iris runs with a short first backoff (``IRIS_SUPERVISOR_BACKOFF_MS``) so the
crash tests do not wait a second per restart; everything else is the production path.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import AgentLaunch
from iris_runtime.provision.process_groups import group_alive, stop_recorded
from iris_runtime.provision.process_service import NO_SUPERVISOR, ProcessService
from iris_runtime.provision.supervised import SupervisedProcess, SupervisedStore
from iris_runtime.testing.server import IrisServer, free_port

pytestmark = pytest.mark.slow

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


@pytest.fixture
def reap_agents(tmp_path: Path) -> Iterator[None]:
    """After the test (and after its Iris servers stopped: request this fixture first), stop
    any agent still recorded under ``tmp_path``: a failed test may leave an orphan behind."""
    yield
    for db in tmp_path.rglob("state.db"):
        with SupervisedStore(db.parent) as store:
            for process in store.all():
                if process.pid is not None:
                    stop_recorded(process.name, process.pid, process.pid_start_time)


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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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


def test_agent_runs_restarts_after_kill_and_is_removed(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    launch = agent_launch(tmp_path)
    lines: list[str] = []

    service.install(launch, lines.append)

    assert service.exists("digest")
    assert any("running" in line for line in lines), lines
    pid = running_pid(iris.data_dir)
    wait_for(lambda: healthy(launch), "the agent's /health")
    # Its bridge takes the API token it made for itself in its home.
    token = (launch.home / "api-token").read_text().strip()
    reply = http_get(f"{launch.bridge_url}/bridge/jobs/{uuid.uuid4()}", token)
    assert reply is not None and reply[0] == 404
    assert json.loads(reply[1])["code"] == "unknown_job"

    # The agent sees its own literal settings and none of Iris's secrets.
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in item
    )
    assert environ["AGENT_NAME"] == "digest"
    assert environ["IRIS_DATA_DIR"] == str(launch.home)
    assert "IRIS_API_TOKEN" not in environ
    assert "ANTHROPIC_API_KEY" not in environ
    assert iris.token not in "\n".join(environ.values())
    assert PARENT_SECRET not in "\n".join(environ.values())
    log_path = launch.home / "logs" / "agent.log"
    assert log_path.stat().st_mode & 0o777 == 0o600

    # kill -9 of the agent: the supervisor clears its group (the gunicorn worker holds the
    # ports) and starts a new one after the backoff.
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: (
            (r := row(iris.data_dir)) is not None
            and r.state == "running"
            and r.pid not in (None, pid)
        ),
        "a restarted agent",
    )
    restarted = row(iris.data_dir)
    assert restarted is not None
    assert restarted.restarts == 1
    assert restarted.last_exit == "killed by SIGKILL"
    wait_for(lambda: healthy(launch), "the restarted agent's /health")
    assert "killed by SIGKILL; restarting" in log_path.read_text()

    assert service.remove("digest", lines.append) is True
    assert restarted.pid is not None
    wait_for(lambda: not alive(restarted.pid), "the removed agent's process to be gone")
    assert row(iris.data_dir) is None
    assert not service.exists("digest")
    assert port_free(launch.api_port) and port_free(launch.bridge_port)
    assert service.remove("digest", lines.append) is False  # idempotent


def test_agents_stop_and_start_with_iris_and_orphans_are_adopted(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    launch = agent_launch(tmp_path)
    service.install(launch, lambda line: None)
    first = running_pid(iris.data_dir)
    wait_for(lambda: healthy(launch), "the agent's /health")

    # A clean stop of Iris stops the agent; the row still wants it running.
    assert iris.stop() == 0
    assert not alive(first)
    assert port_free(launch.api_port) and port_free(launch.bridge_port)
    stopped = row(iris.data_dir)
    assert stopped is not None and stopped.desired == "running" and stopped.state == "stopped"
    assert not service.supervisor_alive()

    # Iris starts again: so does the agent.
    iris = start_iris(iris.data_dir, **IRIS_ENV)
    wait_for(lambda: (r := row(iris.data_dir)) is not None and r.state == "running", "restart")
    second = running_pid(iris.data_dir)
    assert second != first
    wait_for(lambda: healthy(launch), "the agent's /health after Iris restarted")

    # Iris killed with -9: the agent lives on, orphaned, and nobody supervises.
    kill_iris_hard(iris)
    assert alive(second) and healthy(launch)
    assert not service.supervisor_alive()
    other = agent_launch(tmp_path, "other")
    with pytest.raises(ProvisionError) as refused:
        service.install(other, lambda line: None)
    assert refused.value.message == NO_SUPERVISOR
    assert not service.exists("other")

    # Its log grew past the limit while nobody watched it.
    agent_log = launch.home / "logs" / "agent.log"
    with agent_log.open("ab") as padding:
        padding.write(b"x" * (10 * 1024 * 1024 + 1) + b"\n")
    written_to = agent_log.stat().st_ino

    # The next Iris adopts the orphan: the same process serves on (whatever it was doing, a
    # delegated run say, goes on), now watched by the new supervisor...
    iris = start_iris(iris.data_dir, **IRIS_ENV)
    wait_for(lambda: "did not stop it; watching it" in iris.log_tail(200), "the adoption")
    assert alive(second) and healthy(launch) and running_pid(iris.data_dir) == second
    # ...its log bounded in place (copied and truncated), never moved away from under it.
    assert agent_log.stat().st_ino == written_to and agent_log.stat().st_size < 1024 * 1024
    assert (launch.home / "logs" / "agent.log.1").stat().st_size > 10 * 1024 * 1024
    assert f"adopted pid {second}" in agent_log.read_text()
    # ...which starts a fresh one when it ends, as it would for a child of its own.
    os.killpg(second, signal.SIGKILL)
    wait_for(
        lambda: (
            (r := row(iris.data_dir)) is not None
            and r.state == "running"
            and r.pid not in (None, second)
        ),
        "a fresh agent after the adopted one ended",
    )
    ended = row(iris.data_dir)
    assert ended is not None and ended.last_exit is not None
    assert ended.last_exit.startswith("ended (status unknown")
    wait_for(lambda: healthy(launch), "the fresh agent's /health")

    assert service.remove("digest", lambda line: None)
    assert port_free(launch.api_port) and port_free(launch.bridge_port)


def test_an_orphan_never_reported_running_for_the_current_wish_is_replaced(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    """An orphan Iris cannot vouch for (its wish was renewed after it started, or it died
    before it was reported running) is stopped and a fresh agent started."""
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    launch = agent_launch(tmp_path)
    service.install(launch, lambda line: None)
    orphan = running_pid(iris.data_dir)
    wait_for(lambda: healthy(launch), "the agent's /health")
    kill_iris_hard(iris)
    recorded = row(iris.data_dir)
    assert recorded is not None and recorded.pid == orphan and alive(orphan)
    with SupervisedStore(iris.data_dir) as store:  # the row as Iris left it had she died sooner
        store.report("digest", state="starting", pid=orphan, pid_start_time=recorded.pid_start_time)

    iris = start_iris(iris.data_dir, **IRIS_ENV)
    wait_for(
        lambda: (
            (r := row(iris.data_dir)) is not None
            and r.state == "running"
            and r.pid not in (None, orphan)
        ),
        "a fresh agent after the orphan",
    )
    assert not alive(orphan)
    wait_for(lambda: healthy(launch), "the fresh agent's /health")
    assert "left running by an Iris that did not stop it" in iris.log_tail(200)
    assert service.remove("digest", lambda line: None)


def test_install_fails_cleanly(reap_agents: None, start_iris: StartIris, tmp_path: Path) -> None:
    # No Iris at all: a clear refusal and nothing left behind.
    lonely = ProcessService(tmp_path / "no-iris")
    (tmp_path / "no-iris").mkdir()
    with pytest.raises(ProvisionError, match="process mode needs a running Iris"):
        lonely.install(agent_launch(tmp_path, "lonely"), lambda line: None)
    assert not lonely.exists("lonely")

    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)

    # A command that exits at once: install fails with its log, and the row is gone.
    crashing = agent_launch(
        tmp_path,
        "crashing",
        (sys.executable, "-c", "import sys; print('exploded on purpose'); sys.exit(3)"),
    )
    with pytest.raises(ProvisionError) as failed:
        service.install(crashing, lambda line: None)
    assert "exit status 3" in failed.value.message
    assert "exploded on purpose" in failed.value.message
    assert not service.exists("crashing")

    # A command that cannot even start: same, and the supervisor keeps working afterwards.
    missing = agent_launch(tmp_path, "missing", ("/nonexistent/iris",))
    with pytest.raises(ProvisionError, match="No such file"):
        service.install(missing, lambda line: None)
    assert not service.exists("missing")

    good = agent_launch(tmp_path, "good")
    service.install(good, lambda line: None)
    wait_for(lambda: healthy(good), "the good agent's /health")
    assert service.remove("good", lambda line: None)


def test_unusable_state_db_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    service = ProcessService(tmp_path)
    with pytest.raises(ProvisionError, match=r"state\.db is unusable"):
        service.exists("digest")
    with pytest.raises(ProvisionError, match=r"state\.db is unusable"):
        service.install(agent_launch(tmp_path), lambda line: None)


def test_secret_values_are_refused_in_a_row(tmp_path: Path) -> None:
    launch = agent_launch(tmp_path)
    with SupervisedStore(tmp_path) as store, pytest.raises(ProvisionError, match="IRIS_API_TOKEN"):
        store.request(
            "digest",
            launch.command,
            {**launch.environment, "IRIS_API_TOKEN": "secret"},
            launch.home,
            tmp_path / "agent.log",
        )
    assert row(tmp_path) is None


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


def test_an_agent_ignoring_sigterm_holds_up_neither_other_agents_nor_the_heartbeat(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    stubborn = agent_launch(tmp_path, "stubborn", STUBBORN)
    service.install(stubborn, lambda line: None)
    pid = running_pid(iris.data_dir, "stubborn")
    wait_for(lambda: log_says(stubborn, "ready"), "the stubborn agent to trap SIGTERM")

    lines: list[str] = []
    outcome: list[bool] = []
    remover = remove_in_background(service, "stubborn", lines, outcome)
    wait_for(lambda: log_says(stubborn, "got SIGTERM"), "SIGTERM to reach the stubborn agent")

    # While it is being stopped, another agent is installed and runs ...
    other = agent_launch(tmp_path, "other", SLEEPER)
    service.install(other, lambda line: None)
    other_pid = running_pid(iris.data_dir, "other")
    assert alive(pid), "the stubborn agent should still be waiting out its grace period"

    # ... and Iris keeps beating (a fresh heartbeat, written again and again) until it is gone.
    beats: set[float] = set()
    deadline = time.monotonic() + WAIT
    while alive(pid):
        assert time.monotonic() < deadline, "the stubborn agent was never killed"
        with SupervisedStore(iris.data_dir) as store:
            beat = store.supervisor()
        assert beat is not None and beat.is_alive(), beat
        beats.add(beat.heartbeat)
        time.sleep(0.2)
    assert len(beats) >= 2, "the heartbeat was not written while the agent was being stopped"

    remover.join(WAIT)
    assert outcome == [True]
    assert not any("directly" in line for line in lines), lines  # the CLI only waited
    assert row(iris.data_dir, "stubborn") is None
    assert not group_alive(pid)
    assert f"stubborn (pid {pid}) ignored SIGTERM; killing it" in iris.log_tail(200)

    assert running_pid(iris.data_dir, "other") == other_pid
    assert service.remove("other", lambda line: None)
    assert not group_alive(other_pid)


def test_stopping_iris_stops_every_agent_even_those_ignoring_sigterm(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    launches = {
        "family": agent_launch(tmp_path, "family", FAMILY),
        "stubborn": agent_launch(tmp_path, "stubborn", STUBBORN),
        "leaving": agent_launch(tmp_path, "leaving", STUBBORN),
    }
    pids = {}
    for name, launch in launches.items():
        service.install(launch, lambda line: None)
        pids[name] = running_pid(iris.data_dir, name)
        wait_for(lambda launch=launch: log_says(launch, "ready"), f"{name} to be ready")

    # One of them is being removed (and ignores SIGTERM) when Iris is asked to stop.
    lines: list[str] = []
    outcome: list[bool] = []
    remover = remove_in_background(service, "leaving", lines, outcome)
    wait_for(lambda: log_says(launches["leaving"], "got SIGTERM"), "the removal to begin")

    assert iris.stop() == 0
    remover.join(WAIT)

    # No process group is left behind, the stop finished its work (reports written, the
    # heartbeat cleared last), and the removal completed without the CLI signalling anything.
    for name, pid in pids.items():
        assert not group_alive(pid), f"{name}'s process group outlived Iris"
    for name in ("family", "stubborn"):
        stopped = row(iris.data_dir, name)
        assert stopped is not None
        assert (stopped.desired, stopped.state, stopped.pid) == ("running", "stopped", None)
    assert row(iris.data_dir, "leaving") is None
    assert outcome == [True]
    assert not any("directly" in line for line in lines), lines
    with SupervisedStore(iris.data_dir) as store:
        assert store.supervisor() is None

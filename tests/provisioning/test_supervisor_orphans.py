"""Process mode end to end, when Iris stops or dies: its agents stop and start with it; after
``kill -9`` they live on as orphans that the next Iris adopts (their logs bounded in place), or
replaces when it cannot vouch for them. A real ``iris serve`` supervises real sub-agents."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.process_service import NO_SUPERVISOR, ProcessService
from iris_runtime.provision.supervised import SupervisedStore
from tests.provisioning.supervised_agents import (
    IRIS_ENV,
    StartIris,
    agent_launch,
    alive,
    healthy,
    kill_iris_hard,
    port_free,
    row,
    running_pid,
    wait_for,
)

pytestmark = pytest.mark.slow


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
    wait_for(lambda: f"adopted pid {second}" in agent_log.read_text(), "the adoption")
    wait_for(lambda: "did not stop it; watching it" in iris.log_tail(200), "the log line")
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

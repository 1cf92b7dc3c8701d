"""Process mode end to end, with agents that ignore SIGTERM: one being removed holds up neither
the other agents nor the supervisor's heartbeat, and stopping Iris still leaves no process group
behind. A real ``iris serve`` supervises stand-in agents that are quick to start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from iris_runtime.provision.process_groups import group_alive
from iris_runtime.provision.process_service import ProcessService
from iris_runtime.provision.supervised import SupervisedStore
from tests.provisioning.supervised_agents import (
    FAMILY,
    IRIS_ENV,
    SLEEPER,
    STUBBORN,
    WAIT,
    StartIris,
    agent_launch,
    alive,
    log_says,
    remove_in_background,
    row,
    running_pid,
    wait_for,
)

pytestmark = pytest.mark.slow


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

"""Exactly one announce per session sub-agent run, whatever moment Iris is killed at.

Each trial arms one failpoint (see ``iris_runtime.failpoints``): the serving process kills
itself with SIGKILL when execution reaches it — while the child runs, after the announce is
written to the outbox but before delivery, or in the middle of delivery (logged in the origin
chat, not yet recorded as delivered). gunicorn starts a new worker, which must finish the work:
the run is announced exactly once, an interrupted child as ``Status: error`` with a note.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.faults.tally import tally, trials
from tests.session_agents.conftest import announces, subagents, wait_for_announces

Serve = Callable[..., IrisServer]
POINTS = {
    "subagents.child_running": "Status: error",
    "subagents.announce_recorded": "Status: success",
    "subagents.announce_logged": "Status: success",
}


def wait_healthy(iris: IrisServer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if iris.get("/health", auth=False, timeout=2).status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    raise AssertionError("Iris never came back:\n" + iris.log_tail())


def start_spawn(iris: IrisServer, session: str, task: str) -> None:
    """Ask the main agent to spawn; the worker may die before it answers."""
    text = "spawn " + json.dumps([{"task": task}])
    # Killed mid-request: the spawn was recorded before the child could start.
    with contextlib.suppress(OSError, http.client.HTTPException):
        iris.post(f"/sessions/{session}/message", json_body={"text": text}, timeout=30)


@pytest.mark.parametrize("point", sorted(POINTS))
def test_every_run_is_announced_exactly_once(serve: Serve, tmp_path: Path, point: str) -> None:
    armed = tmp_path / "failpoint"
    iris = serve(IRIS_FAILPOINT_FILE=str(armed))
    sessions = []
    for trial in range(trials()):
        session = f"crash{trial}"
        sessions.append(session)
        armed.write_text(point)
        start_spawn(iris, session, f"trial {trial} work")
        deadline = time.monotonic() + 30
        while armed.exists():
            assert time.monotonic() < deadline, f"{point} never fired:\n{iris.log_tail()}"
            time.sleep(0.02)
        wait_healthy(iris)
        [announce, *_] = wait_for_announces(iris, session, 1)
        assert POINTS[point] in announce["text"], announce["text"]
        if point == "subagents.child_running":
            assert "Iris restarted while this sub-agent was running" in announce["text"]
    time.sleep(1.0)  # a duplicate would be delivered by now
    figures = tally(f"session sub-agent, Iris killed at {point}")
    for session in sessions:
        figures.record(expected=1, seen=len(announces(iris, session)), what=session)
    figures.assert_clean()
    assert all(len(subagents(iris, s)) == 1 for s in sessions)

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
import sqlite3
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


def wait_until_all_delivered(iris: IrisServer, timeout: float = 60) -> None:
    """Until every announce in the outbox is delivered (read from ``state.db``, read-only)."""
    uri = f"file:{iris.data_dir / 'state.db'}?mode=ro"
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10)) as db:
            waiting = db.execute(
                "SELECT count(*) FROM subagent_announces WHERE state IN ('pending', 'logged')"
            ).fetchone()[0]
        if waiting == 0:
            return
        assert time.monotonic() < deadline, f"{waiting} announces never delivered"
        time.sleep(0.1)


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
    wait_until_all_delivered(iris)  # nothing left that could still be delivered twice
    figures = tally(f"session sub-agent, Iris killed at {point}")
    for session in sessions:
        figures.record(expected=1, seen=len(announces(iris, session)), what=session)
    figures.assert_clean()
    assert all(len(subagents(iris, s)) == 1 for s in sessions)

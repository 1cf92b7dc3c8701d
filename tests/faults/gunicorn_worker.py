"""The gunicorn worker of a served Iris: finding it, killing it, waiting for its successor.

``iris serve`` runs one worker, forked by the gunicorn master (the process the test started), and
everything that matters (engine, event service, supervisor) lives in that worker. A crash trial
kills the worker with SIGKILL, from outside at a moment of its choosing or from inside at a named
failpoint (``iris_runtime.failpoints``); the master forks a new worker, whose start-up must
settle what the old one left.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer

# Generous: the machine is shared and loaded; a deadline only bounds a hang.
DEADLINE_SECONDS = 120.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _parent_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (in parentheses) may hold spaces: the fields after it are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if fields[0] != "Z" else None  # a zombie is already dead


def _workers(iris: IrisServer) -> list[int]:
    assert iris.process is not None, "Iris is not running"
    master = iris.process.pid
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent_of(p) == master]


def worker_pid(iris: IrisServer) -> int:
    """The pid of Iris's one live worker (waiting for the master to fork it if need be)."""
    found: list[int] = []

    def one_worker() -> bool:
        found[:] = _workers(iris)
        return len(found) == 1

    wait_until(one_worker, f"one gunicorn worker:\n{iris.log_tail()}")
    return found[0]


def kill_worker(iris: IrisServer) -> int:
    """SIGKILL the worker (no cleanup, no flush: a power cut for the engine); its pid."""
    pid = worker_pid(iris)
    os.kill(pid, signal.SIGKILL)
    return pid


def healthy(iris: IrisServer) -> bool:
    with contextlib.suppress(OSError, http.client.HTTPException):
        return iris.get("/health", auth=False, timeout=5).status == 200
    return False


def wait_for_successor(iris: IrisServer, killed: int) -> int:
    """Wait until a worker other than ``killed`` serves ``/health``; its pid. (Checking the pid
    first matters: a worker that fires a failpoint answers a request or two before it dies.)"""
    successor: list[int] = []

    def replaced() -> bool:
        successor[:] = [pid for pid in _workers(iris) if pid != killed]
        return len(successor) == 1 and healthy(iris)

    wait_until(replaced, f"a new worker after {killed} was killed:\n{iris.log_tail()}")
    return successor[0]


def arm(armed: Path, point: str) -> None:
    """Make the worker kill itself the next time it passes ``point``."""
    armed.write_text(point)


def wait_for_failpoint(iris: IrisServer, armed: Path, point: str, worker: int) -> int:
    """Wait until ``point`` has fired (the worker removes the file, then kills itself) and a new
    worker serves; the new worker's pid."""
    wait_until(lambda: not armed.exists(), f"{point} to fire")
    return wait_for_successor(iris, worker)

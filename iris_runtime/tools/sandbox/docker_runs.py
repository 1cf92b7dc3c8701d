"""Which commands are in flight in a docker-level container, across every process of one Iris
(its worker, an overlapping new worker, ``iris doctor --sandbox``), so the sweep of what
commands left behind never kills a command that is still running or about to start.

Each run holds a shared ``flock`` on ``<data dir>/run/docker-<container id>.lock`` from launch
to clean-up; the sweep runs only under the exclusive lock, which it can take only when no run
holds the shared one. A run that starts while a sweep is going waits for it. The kernel drops a
dead process's locks, so a crash never blocks the sweep for good. Two Irises cannot share a
container (each needs its own work folder at /workspace), so the data dir is the right scope.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from iris_runtime import data_layout


class RunGate:
    def __init__(self, data_dir: Path, container_id: str) -> None:
        self._path = data_dir / data_layout.RUN_DIR / f"docker-{container_id[:64]}.lock"

    def enter(self) -> int:
        """Count a run in (blocks while a sweep runs); returns what :meth:`leave` takes."""
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def leave(self, fd: int, sweep: Callable[[], None], otherwise: Callable[[], None]) -> None:
        """Count the run out: when it was the last one anywhere, ``sweep`` the container, else
        run ``otherwise`` (the run's own clean-up, which the sweep would have covered)."""
        os.close(fd)
        try:
            last = self._open()
        except OSError:
            otherwise()
            return
        try:
            try:
                fcntl.flock(last, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                otherwise()  # another run is in flight: the last one sweeps
                return
            sweep()
        finally:
            os.close(last)

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        return os.open(self._path, flags, 0o600)

"""The supervisor's hold on its data dir: the lock, and the heartbeat a CLI reads.

One supervisor per data dir: a ``flock`` on ``run/supervisor.lock`` makes a second runtime on
the same data dir stand by instead of fighting over the same rows.

While it holds the lock, a thread of its own writes the heartbeat every ``HEARTBEAT_SECONDS``
(with a connection of its own, so a slow write of the loop's never delays it), so a CLI knows
somebody will act on what it writes. It beats as long as the loop keeps making passes
(:meth:`SupervisorHeartbeat.passed`): a loop that hangs for ``STALL_SECONDS`` stops the beat, so
a hung supervisor goes stale.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from pathlib import Path
from typing import IO

from iris_runtime import data_layout
from iris_runtime.provision.supervised import SupervisedStore

# The supervisor's lines keep one logger name, whichever of its modules writes them.
log = logging.getLogger("iris_runtime.provision.supervisor")

HEARTBEAT_SECONDS = 2.0  # well under supervised.HEARTBEAT_STALE_SECONDS (30 s)
STALL_SECONDS = 20.0  # no pass for this long: the loop hangs, stop beating


class SupervisorHeartbeat:
    """The data dir's supervisor lock and the heartbeat written while it is held, for the
    process ``pid`` (started at ``pid_start``, see :func:`~.supervised.process_start_time`)."""

    def __init__(self, data_dir: Path, store: SupervisedStore) -> None:
        self.data_dir = data_dir
        self.pid = 0
        self.pid_start = 0
        self._store = store  # the loop's: the first beat goes with taking the lock
        self._lock_file: IO[bytes] | None = None
        self._standing_by = False
        self._progress = 0.0  # monotonic: when the loop last began a pass
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._lock_file is not None

    def passed(self) -> None:
        """The loop is making progress (it began a pass, or Iris is stopping its children)."""
        self._progress = time.monotonic()

    def hold(self) -> bool:
        """Take the data dir's supervisor lock if we do not hold it yet (and beat at once)."""
        if self._lock_file is not None:
            return True
        run = self.data_dir / data_layout.RUN_DIR
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = (run / "supervisor.lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            if not self._standing_by:
                log.warning("another process supervises %s; standing by", self.data_dir)
                self._standing_by = True
            return False
        self._lock_file = handle
        self._standing_by = False
        self._store.beat(self.pid, self.pid_start)
        return True

    def start(self, pid: int, pid_start: int) -> None:
        """Beat for ``pid`` from now on, whenever the lock is held (:meth:`hold` takes it)."""
        self.pid, self.pid_start = pid, pid_start
        self._stopping.clear()
        self.passed()
        self._thread = threading.Thread(
            target=self._beat_loop, name="iris-supervisor-heartbeat", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (the heartbeat row stays until :meth:`release`)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def release(self) -> None:
        """Forget our heartbeat (only ours) and let go of the lock."""
        if self._lock_file is None:
            return
        try:
            self._store.clear_beat(self.pid)
        finally:
            self._lock_file.close()
            self._lock_file = None

    def _beat_loop(self) -> None:
        store = SupervisedStore(self.data_dir)
        last_problem = ""
        try:
            while not self._stopping.wait(HEARTBEAT_SECONDS):
                if self._lock_file is None:
                    continue
                if time.monotonic() - self._progress > STALL_SECONDS:
                    problem = "the supervisor loop is stuck; no heartbeat until it moves again"
                else:
                    try:
                        store.beat(self.pid, self.pid_start)
                    except Exception as exc:  # try again at the next beat
                        problem = f"heartbeat failed: {type(exc).__name__}: {exc}"
                    else:
                        problem = ""
                if problem and problem != last_problem:
                    log.error("supervisor: %s", problem)
                last_problem = problem
        finally:
            store.close()

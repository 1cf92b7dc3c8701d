"""A background thread that does a round of work at start, whenever woken, and when its next
round falls due: the announce delivery and the archiver are both one."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

log = logging.getLogger(__name__)

FAILURE_PAUSE_SECONDS = 5.0  # a round that raised (state.db failed): try again after this


class Worker(ABC):
    name = "iris-worker"

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._woken = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    @abstractmethod
    def round(self) -> float | None:
        """Do what is due; return the seconds until the next round is due (None: only when
        woken)."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        with self._wake:
            self._woken = True
            self._wake.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _serve(self) -> None:
        while True:
            try:
                pause = self.round()
            except Exception:  # keep the thread: the next round may find the store usable
                log.exception("%s: a round failed; trying again shortly", self.name)
                pause = FAILURE_PAUSE_SECONDS
            with self._wake:
                if self._stopping:
                    return
                if not self._woken:
                    self._wake.wait(_bounded(pause))
                self._woken = False
                if self._stopping:
                    return


def _bounded(pause: float | None) -> float | None:
    """A wait ``threading`` accepts: at least 50 ms, at most TIMEOUT_MAX."""
    if pause is None:
        return None
    return min(max(0.05, pause), threading.TIMEOUT_MAX)

"""A run's handle and result: what a waiter (an HTTP request, a bridge call) holds on to."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from iris_runtime.engine.provider import Usage


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str  # done | stopped | failed | max_turns | cancelled
    text: str
    error: str | None = None
    error_code: str | None = None
    usage: Usage = field(default_factory=Usage)
    turn_usage: tuple[Usage, ...] = ()
    agent: str | None = None  # set when a sub-agent answered instead of Iris's own model
    silent: bool = False  # nothing to say ([SILENT]): the transport posted nothing


class RunTicket:
    """Resolves exactly once, whatever happens to the run (finish, stop, crash, shutdown)."""

    def __init__(self, run_id: str, channel: str) -> None:
        self.run_id = run_id
        self.channel = channel
        self._done = threading.Event()
        self._result: RunResult | None = None
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[RunResult], None]] = []

    def resolve(self, result: RunResult) -> bool:
        with self._lock:
            if self._result is not None:
                return False
            self._result = result
            callbacks, self._callbacks = self._callbacks, []
        self._done.set()
        for callback in callbacks:
            _call_safely(callback, result)
        return True

    def add_done_callback(self, callback: Callable[[RunResult], None]) -> None:
        """Call ``callback(result)`` once the run resolves (at once if it already has)."""
        with self._lock:
            result = self._result
            if result is None:
                self._callbacks.append(callback)
                return
        _call_safely(callback, result)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"run {self.run_id} still running after {timeout}s")
        assert self._result is not None
        return self._result


def _call_safely(callback: Callable[[RunResult], None], result: RunResult) -> None:
    try:
        callback(result)
    except Exception:  # a waiter's bug must not break the run that resolved it
        logging.getLogger(__name__).exception("run callback failed")

"""A run's handle and result: what a waiter (an HTTP request, a bridge call) holds on to."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from iris_runtime.engine.provider import Usage
from iris_runtime.engine.transport import TransportEvent


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str  # done | stopped | failed | max_turns | cancelled
    text: str
    error: str | None = None
    error_code: str | None = None
    usage: Usage = field(default_factory=Usage)


class RunTicket:
    """Resolves exactly once, whatever happens to the run (finish, stop, crash, shutdown)."""

    def __init__(self, run_id: str, channel: str) -> None:
        self.run_id = run_id
        self.channel = channel
        self._done = threading.Event()
        self._result: RunResult | None = None
        self._lock = threading.Lock()

    def resolve(self, result: RunResult) -> bool:
        with self._lock:
            if self._result is not None:
                return False
            self._result = result
        self._done.set()
        return True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"run {self.run_id} still running after {timeout}s")
        assert self._result is not None
        return self._result


@dataclass
class Run:
    run_id: str
    channel: str
    transport_id: str
    event: TransportEvent
    is_event: bool
    lane: str
    ticket: RunTicket
    abort: threading.Event = field(default_factory=threading.Event)

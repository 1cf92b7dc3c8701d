"""Message-edit pacing: at most one edit per interval per conversation.

Chat platforms allow about one edit per second in one conversation (Slack's ``chat.update`` per
channel, Telegram's ``editMessageText`` per chat). :class:`EditPacer` hands out one edit slot per
key (the conversation) at a time. A slot is held from when it is taken until the edit's answer
(:meth:`EditPacer.done`), and the next one is free ``interval`` seconds after that answer, so the
platform never sees two edits of one conversation closer than the interval, however long it takes
to answer. Every attempt takes a slot of its own (a retried edit is paced like a new one).

Three ways to take a slot, for three kinds of edit:

- :meth:`EditPacer.reserve`: now or never. It returns 0.0 with the slot taken, or the seconds
  until it is free; for cosmetic edits (progress) that the caller defers and coalesces.
- :meth:`EditPacer.wait_and_reserve`: an edit that must happen waits for the slot. It gives up
  (False, no slot) when the wait is cut short: the transport is stopping.
- :meth:`EditPacer.slot`: a context manager around one request; it waits like
  ``wait_and_reserve`` but on a stop the edit goes at once (a stopping run's last edits still
  matter), and the slot is handed back when the block ends.

Every ``reserve`` that returns 0.0 and every ``wait_and_reserve`` that returns True must be
followed by ``done``. The clock and the sleep are injectable, so the rule is tested without real
time: ``sleep(seconds)`` returns something true when the wait was cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["EDIT_INTERVAL_SECONDS", "EditPacer", "Sleep"]

EDIT_INTERVAL_SECONDS = 1.0

Sleep = Callable[[float], object]

# While another edit of the key is in flight, re-check this often; its answer wakes the waiters.
_BUSY_POLL_SECONDS = 0.5
# Answers older than the interval are forgotten once this many keys are remembered.
_REMEMBERED_KEYS = 1024


class EditPacer:
    # An edit in flight for longer than this is assumed lost (a call times out well before).
    STALE_IN_FLIGHT = 120.0

    def __init__(
        self,
        interval: float = EDIT_INTERVAL_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep | None = None,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._stopping = threading.Event()
        self._sleep: Sleep = sleep or self._stopping.wait
        self._in_flight: dict[str, float] = {}  # key -> when its edit started
        self._answered: dict[str, float] = {}  # key -> when its last edit was answered
        self._cond = threading.Condition()

    def reserve(self, key: str) -> float:
        """Take ``key``'s slot now and return 0.0, or return how long until it is free."""
        with self._cond:
            return self._reserve(key)

    def done(self, key: str) -> None:
        """The edit that took ``key``'s slot has been answered: the interval counts from now.
        Nothing to do when no slot of ``key`` is held."""
        with self._cond:
            if self._in_flight.pop(key, None) is None:
                return
            now = self.clock()
            self._answered[key] = now
            self._forget_idle(now)
            self._cond.notify_all()

    def wait_and_reserve(self, key: str, sleep: Sleep | None = None) -> bool:
        """Wait until ``key``'s slot is free and take it (True); False, without the slot, when
        the wait was cut short (``sleep`` returned true, or :meth:`stop`)."""
        pause = sleep or self._sleep
        while True:
            with self._cond:
                wait = self._reserve(key)
                if wait <= 0:
                    return True
                if self._busy(key):
                    if self._stopping.is_set():
                        return False
                    self._cond.wait(_BUSY_POLL_SECONDS)
                    continue
            if pause(wait):
                return False

    @contextmanager
    def slot(self, key: str, sleep: Sleep | None = None) -> Iterator[None]:
        """Hold ``key``'s slot for one request: waits (through ``sleep``) for the previous
        edit's answer plus the interval; the interval restarts when the block ends. A wait cut
        short does not hold the edit back: a stopping transport's last edits still matter."""
        if not self.wait_and_reserve(key, sleep):
            with self._cond:
                self._in_flight[key] = self.clock()
        try:
            yield
        finally:
            self.done(key)

    def wait_hint(self, key: str) -> float:
        """Seconds until the interval after ``key``'s last answered edit has passed (0 when it
        has); an edit in flight is not counted, its answer restarts the interval."""
        with self._cond:
            answered = self._answered.get(key)
            if answered is None:
                return 0.0
            return max(0.0, answered + self.interval - self.clock())

    def stop(self) -> None:
        """End every wait: waiting callers give up (``slot`` callers go at once)."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def _reserve(self, key: str) -> float:
        now = self.clock()
        if self._busy(key, now):
            return max(self.interval, 0.05)  # the edit in flight sets the next interval
        answered = self._answered.get(key)
        if answered is not None and now - answered < self.interval:
            return self.interval - (now - answered)
        self._in_flight[key] = now
        return 0.0

    def _busy(self, key: str, now: float | None = None) -> bool:
        started = self._in_flight.get(key)
        if started is None:
            return False
        return (self.clock() if now is None else now) - started < self.STALE_IN_FLIGHT

    def _forget_idle(self, now: float) -> None:
        if len(self._answered) > _REMEMBERED_KEYS:
            horizon = now - self.interval
            self._answered = {k: at for k, at in self._answered.items() if at > horizon}

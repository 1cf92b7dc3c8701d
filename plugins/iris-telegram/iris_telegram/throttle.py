"""At most one message edit per interval per chat (Telegram allows about one per second).

Progress edits ask :meth:`EditThrottle.reserve` and, when the chat's slot is taken, are deferred
and coalesced by the caller (only the latest status is shown). Edits that must happen (the final
reply replacing the placeholder) wait for the slot with :meth:`EditThrottle.wait_and_reserve`.
A slot is held from :meth:`reserve` until :meth:`done` (the edit's answer): while an edit is in
flight no other edit in the chat may start, however long Telegram takes to answer. Every
``reserve`` that returns 0.0 must be followed by ``done``. The clock and the sleep are
injectable, so the rule is tested without real time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class EditThrottle:
    def __init__(
        self,
        interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._stopping = threading.Event()
        # ``sleep(seconds)`` returns True when waiting was cut short (the transport stopped).
        self._sleep = sleep or self._stopping.wait
        self._last: dict[str, float] = {}
        self._in_flight: dict[str, float] = {}  # key -> when its edit started
        self._lock = threading.Lock()

    # An edit in flight for longer than this is assumed lost (a call times out well before).
    STALE_IN_FLIGHT = 120.0

    def reserve(self, key: str) -> float:
        """Take ``key``'s slot now and return 0.0, or return how long until it is free."""
        with self._lock:
            now = self._clock()
            started = self._in_flight.get(key)
            if started is not None and now - started < self.STALE_IN_FLIGHT:
                return max(self.interval, 0.05)  # the edit in flight sets the next interval
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                return self.interval - (now - last)
            self._last[key] = now
            self._in_flight[key] = now
            if len(self._last) > 10_000:  # forget chats idle for longer than an interval
                horizon = now - self.interval
                self._last = {k: v for k, v in self._last.items() if v > horizon}
            return 0.0

    def done(self, key: str) -> None:
        """The edit that took the slot has been answered: the interval counts from now, so the
        gap Telegram sees between two edits is never shorter than the interval, whatever the
        network delays."""
        with self._lock:
            self._in_flight.pop(key, None)
            if key in self._last:
                self._last[key] = max(self._last[key], self._clock())

    def wait_and_reserve(self, key: str) -> bool:
        """Wait until ``key``'s slot is free and take it; False if stopped while waiting."""
        while True:
            wait = self.reserve(key)
            if wait <= 0:
                return True
            if self._sleep(wait):
                return False

    def stop(self) -> None:
        self._stopping.set()

"""Edit pacing: Slack's ``chat.update`` allows about one call per second per channel.

:class:`EditPacer` hands out edit slots per channel, one at a time: an edit waits until the
channel's previous edit has been answered and ``interval`` seconds have passed since that answer,
so Slack never sees two edits of a channel closer than the interval, whatever the network delays.
Every attempt takes its own slot (a retried edit is paced like a new one). The clock is injectable
so the rule is testable without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EDIT_INTERVAL_SECONDS = 1.0
# While another edit of the channel is in flight, re-check this often (it notifies on its end).
_BUSY_POLL_SECONDS = 0.5


class EditPacer:
    def __init__(
        self,
        interval: float = EDIT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._next_free: dict[str, float] = {}
        self._busy: set[str] = set()
        self._cond = threading.Condition()

    @contextmanager
    def slot(self, channel: str, sleep: Callable[[float], object]) -> Iterator[None]:
        """Hold the channel's edit slot for one request: waits (through ``sleep``) for the
        previous edit's answer plus the interval; the interval restarts when the block ends."""
        self.acquire(channel, sleep)
        try:
            yield
        finally:
            self.release(channel)

    def acquire(self, channel: str, sleep: Callable[[float], object]) -> None:
        while True:
            with self._cond:
                if channel in self._busy:
                    self._cond.wait(_BUSY_POLL_SECONDS)
                    continue
                delay = self._next_free.get(channel, 0.0) - self.clock()
                if delay <= 0:
                    self._busy.add(channel)
                    return
            if sleep(delay):  # stopping: go now (the last edits still matter)
                with self._cond:
                    self._busy.add(channel)
                return

    def release(self, channel: str) -> None:
        with self._cond:
            self._busy.discard(channel)
            now = self.clock()
            self._next_free[channel] = now + self.interval
            self._forget_idle(now)
            self._cond.notify_all()

    def wait_hint(self, channel: str) -> float:
        """Seconds until the channel's next free slot (0 when an edit may go now)."""
        with self._cond:
            return max(0.0, self._next_free.get(channel, 0.0) - self.clock())

    def _forget_idle(self, now: float) -> None:
        if len(self._next_free) > 1024:
            for channel in [c for c, at in self._next_free.items() if at <= now]:
                del self._next_free[channel]

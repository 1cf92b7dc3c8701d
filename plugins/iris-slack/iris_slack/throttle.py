"""Edit pacing: Slack's ``chat.update`` allows about one call per second per channel.

:class:`EditPacer` hands out edit slots per channel, at least ``interval`` seconds apart; a caller
claims a slot and waits until its time. The clock is injectable so the rule is testable without
waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

EDIT_INTERVAL_SECONDS = 1.0


class EditPacer:
    def __init__(
        self,
        interval: float = EDIT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._next_free: dict[str, float] = {}
        self._lock = threading.Lock()

    def claim(self, channel: str) -> float:
        """Reserve the channel's next edit slot; returns the seconds to wait before using it."""
        with self._lock:
            now = self.clock()
            at = max(now, self._next_free.get(channel, now))
            self._next_free[channel] = at + self.interval
            self._forget_idle(now)
            return at - now

    def wait_hint(self, channel: str) -> float:
        """Seconds until the channel's next free slot (0 when an edit may go now)."""
        with self._lock:
            return max(0.0, self._next_free.get(channel, 0.0) - self.clock())

    def _forget_idle(self, now: float) -> None:
        if len(self._next_free) > 1024:
            for channel in [c for c, at in self._next_free.items() if at <= now]:
                del self._next_free[channel]

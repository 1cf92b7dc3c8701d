"""The reach socket's one rate limit, shared by ``note``, ``run`` and ``chat.new``.

A token bucket: ``burst`` requests at once, refilled at ``per_window`` per ``window`` seconds
(the spec's 30 per five minutes with a burst of 10), for the whole Iris rather than per caller,
since every caller on the machine is equally trusted and equally able to flood the owner.
"""

from __future__ import annotations

import threading
import time


class RateLimit:
    def __init__(self, per_window: int, window: float, burst: int) -> None:
        self._rate = per_window / window  # tokens per second
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

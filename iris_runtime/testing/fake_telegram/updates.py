"""The updates waiting for the bot, and the long polls of ``getUpdates`` that take them.

As on Telegram: an ``offset`` confirms (and forgets) every update below it; a poll waits up to
its ``timeout`` for an update to arrive; a new poll ends the one still waiting with a 409
conflict (two processes polling with one token).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from iris_runtime.testing.fake_telegram.faults import CONFLICT_OTHER_POLLER
from iris_runtime.testing.fake_telegram.server import ApiError

MAX_UPDATES_PER_POLL = 100


class UpdateQueue:
    """Pending updates in ``update_id`` order. ``cond`` is the fake's condition: a new update
    and a new poll notify it, and a waiting poll waits on it."""

    def __init__(self, cond: threading.Condition) -> None:
        self.confirmed_offset = 0
        """The highest ``offset`` a ``getUpdates`` confirmed (updates below it are gone)."""
        self._cond = cond
        self._updates: list[dict[str, Any]] = []
        self._ids = itertools.count(1000)
        self._generation = 0
        self._stopping = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._updates)

    def push(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Queue an update (it gets its ``update_id`` here)."""
        with self._cond:
            update = {**payload, "update_id": next(self._ids)}
            self._updates.append(update)
            self._cond.notify_all()
        return update

    def open(self) -> None:
        with self._cond:
            self._stopping = False

    def close(self) -> None:
        """End every waiting poll (with no updates): the server is stopping."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def poll(self, offset: int, limit: int, timeout: float) -> list[dict[str, Any]]:
        """What ``getUpdates`` answers; raises :class:`ApiError` 409 when a newer poll starts
        while this one waits."""
        limit = min(max(limit, 1), MAX_UPDATES_PER_POLL)
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._cond.notify_all()
            if offset > 0:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
                self.confirmed_offset = max(self.confirmed_offset, offset)
            while True:
                if self._stopping:
                    return []
                if generation != self._generation:
                    raise ApiError(409, CONFLICT_OTHER_POLLER)
                ready = [u for u in self._updates if u["update_id"] >= offset][:limit]
                remaining = deadline - time.monotonic()
                if ready or remaining <= 0:
                    return ready
                self._cond.wait(remaining)

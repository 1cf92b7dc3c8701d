"""Live watchers of a channel (SSE streams, web sockets): the ChannelObserverEvent fan-out.

Whether a run mirrors its events is decided once, when it starts, from who is watching then; see
:meth:`ObserverHub.is_observed`. Nothing is stored for later watchers.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from iris_runtime.errors import EngineStopping, TooManyObservers

log = logging.getLogger(__name__)

ObserverEvent = dict[str, Any]
Observer = Callable[[ObserverEvent], None]

MAX_OBSERVERS_PER_CHANNEL = 8


class ObserverHub:
    def __init__(self, limit: int = MAX_OBSERVERS_PER_CHANNEL) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._by_channel: dict[str, dict[int, Observer]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def register(self, channel: str, observer: Observer) -> int:
        with self._lock:
            if self._closed:
                raise EngineStopping("Iris is shutting down; reconnect after it restarts")
            watchers = self._by_channel.setdefault(channel, {})
            if len(watchers) >= self._limit:
                raise TooManyObservers(
                    f"channel {channel!r} already has {self._limit} live streams; close one first"
                )
            token = next(self._ids)
            watchers[token] = observer
            return token

    def unregister(self, channel: str, token: int) -> None:
        with self._lock:
            watchers = self._by_channel.get(channel)
            if watchers is not None:
                watchers.pop(token, None)
                if not watchers:
                    del self._by_channel[channel]

    def is_observed(self, channel: str) -> bool:
        with self._lock:
            return bool(self._by_channel.get(channel))

    def count(self, channel: str) -> int:
        with self._lock:
            return len(self._by_channel.get(channel, {}))

    def publish(self, channel: str, event: ObserverEvent) -> None:
        with self._lock:
            watchers = list(self._by_channel.get(channel, {}).values())
        for observer in watchers:
            try:
                observer(event)
            except Exception:  # one broken watcher must not break the run or the others
                log.exception("observer of %s failed", channel)

    def close_all(self) -> None:
        """Tell every watcher the process is going away (they receive a ``closed`` event)."""
        with self._lock:
            self._closed = True
            everyone = [(c, list(w.values())) for c, w in self._by_channel.items()]
        for _channel, watchers in everyone:
            for observer in watchers:
                try:
                    observer({"type": "closed"})
                except Exception:
                    log.exception("observer close failed")

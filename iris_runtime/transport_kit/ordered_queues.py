"""Work in submission order per key, keys in parallel, on a small thread pool.

A transport hands inbound work to a pool so that one slow conversation (a download, a
rate-limited chat) never holds up the others, but two messages of one conversation must still be
handled in the order they came. :class:`OrderedQueues` keeps a queue per key and at most one pool
thread draining it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["OrderedQueues"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class OrderedQueues(Generic[K]):
    def __init__(self, workers: int, name: str) -> None:
        self._name = name
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._queues: dict[K, deque[Callable[[], object]]] = {}
        self._lock = threading.Lock()

    def busy(self, key: K) -> bool:
        """Work of ``key`` is queued or running (new work of it would wait behind that)."""
        with self._lock:
            return key in self._queues

    def submit(self, key: K, work: Callable[[], object]) -> None:
        """Run ``work`` after the work of ``key`` queued before it (its result is ignored)."""
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:  # a drain for this key is running: it will get to it
                queue.append(work)
                return
            self._queues[key] = deque([work])
        try:
            self._pool.submit(self._drain, key)
        except RuntimeError:  # shut down: nothing will run it
            with self._lock:
                self._queues.pop(key, None)
            log.info("%s: work for %r dropped: shutting down", self._name, key)

    def shutdown(self, *, drop_pending: bool = False) -> int:
        """Take no new work. Queued work still runs, unless ``drop_pending``: then it is dropped
        (running drains find their queue gone and stop). Returns how much was dropped."""
        dropped = 0
        if drop_pending:
            with self._lock:
                dropped = sum(len(queue) for queue in self._queues.values())
                self._queues.clear()
        self._pool.shutdown(wait=False, cancel_futures=drop_pending)
        return dropped

    def _drain(self, key: K) -> None:
        while True:
            with self._lock:
                queue = self._queues.get(key)
                if queue is None:  # dropped at shutdown
                    return
                if not queue:
                    del self._queues[key]
                    return
                work = queue.popleft()
            try:
                work()
            except Exception:
                log.exception("%s: work for %r failed", self._name, key)

"""Per-conversation ordering of inbound events: events of one channel are handled one after the
other, in the order Slack delivered them (two quick messages must not run in reverse order);
different channels proceed in parallel."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


class OrderedLanes:
    def __init__(self, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="iris-slack-events")
        self._queues: dict[str, deque[Callable[[], None]]] = {}
        self._lock = threading.Lock()

    def submit(self, key: str, work: Callable[[], None]) -> None:
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:  # a drain for this key is running: it will get to it
                queue.append(work)
                return
            self._queues[key] = deque([work])
        try:
            self._pool.submit(self._drain, key)
        except RuntimeError:  # shutting down
            with self._lock:
                self._queues.pop(key, None)

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                queue = self._queues.get(key)
                if queue is None:  # shut down
                    return
                if not queue:
                    del self._queues[key]
                    return
                work = queue.popleft()
            try:
                work()
            except Exception:
                log.exception("slack: handling an event failed")

    def shutdown(self) -> None:
        """Stop taking work; events acknowledged but not yet handled are dropped (Slack will
        not send them again), and how many is said in one log line."""
        with self._lock:
            dropped = sum(len(queue) for queue in self._queues.values())
            self._queues.clear()  # running drains find their lane gone and stop
        self._pool.shutdown(wait=False, cancel_futures=True)
        if dropped:
            log.warning("slack: %d received event(s) were not handled: Iris is stopping", dropped)

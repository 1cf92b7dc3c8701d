"""Per-conversation ordering of inbound events: events of one channel are handled one after the
other, in the order Slack delivered them (two quick messages must not run in reverse order);
different channels proceed in parallel."""

from __future__ import annotations

import logging
from collections.abc import Callable

from iris_runtime.transport_kit.ordered_queues import OrderedQueues

log = logging.getLogger(__name__)


class OrderedLanes:
    def __init__(self, workers: int = 8) -> None:
        self._queues: OrderedQueues[str] = OrderedQueues(workers, "iris-slack-events")

    def submit(self, key: str, work: Callable[[], None]) -> None:
        self._queues.submit(key, work)

    def shutdown(self) -> None:
        """Stop taking work; events acknowledged but not yet handled are dropped (Slack will
        not send them again), and how many is said in one log line."""
        dropped = self._queues.shutdown(drop_pending=True)
        if dropped:
            log.warning("slack: %d received event(s) were not handled: Iris is stopping", dropped)

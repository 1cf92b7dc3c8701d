"""Waiting for something outside the test to become so: a child process to answer, a container
to boot, a cluster to elect a leader.

One loop for all of them: ask, and ask again a little later, until the answer is yes or time is
up. What to do when time is up (which error, which log to quote) stays with the caller, who knows
what it was waiting for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL = 0.05


def poll(
    probe: Callable[[], T],
    timeout: float,
    *,
    interval: float = INTERVAL,
    ignoring: tuple[type[Exception], ...] = (),
) -> T | None:
    """The first truthy ``probe()`` within ``timeout`` seconds, asked every ``interval``
    seconds; ``None`` once time is up.

    An exception of a type in ``ignoring`` counts as "not yet" (a server not listening yet);
    any other one propagates, which is how a probe gives up early (the child it waits for died).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = probe()
        except ignoring:
            answer = None
        if answer:
            return answer
        time.sleep(interval)
    return None

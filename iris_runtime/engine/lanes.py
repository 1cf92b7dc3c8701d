"""Lanes: named thread pools that runs execute on (``main``, ``subagent``, ``events``).

A lane's width bounds how many runs of that kind execute at once across all channels; the
one-run-per-channel rule is the scheduler's job (see :mod:`iris_runtime.engine.core`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

DEFAULT_LANE = "main"


class Lanes:
    def __init__(self, widths: dict[str, int]) -> None:
        self._pools = {
            name: ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"iris-lane-{name}")
            for name, width in widths.items()
        }
        self.widths = dict(widths)

    def submit(self, lane: str, work: Callable[[], None]) -> Future[None]:
        pool = self._pools.get(lane)
        if pool is None:
            raise ValueError(f"unknown lane {lane!r}; lanes are {', '.join(self._pools)}")
        return pool.submit(work)

    def shutdown(self, *, wait: bool) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=wait, cancel_futures=True)

"""Per-key ordered work for transports: one key's work runs in order, keys in parallel, and a
shutdown either lets queued work finish or drops it."""

from __future__ import annotations

import functools
import threading
import time

from iris_runtime.transport_kit.ordered_queues import OrderedQueues


def test_one_keys_work_runs_in_order_while_other_keys_go_on() -> None:
    queues: OrderedQueues[str] = OrderedQueues(2, "test-queues")
    release = threading.Event()
    done: list[str] = []
    other = threading.Event()
    queues.submit("a", lambda: release.wait(5))
    for n in range(3):
        queues.submit("a", functools.partial(done.append, f"a{n}"))
    queues.submit("b", other.set)
    assert other.wait(5)  # "b" is not held up by "a"
    assert queues.busy("a") and done == []
    release.set()
    queues.shutdown()  # queued work still runs
    for _ in range(100):
        if not queues.busy("a"):
            break
        time.sleep(0.05)
    assert done == ["a0", "a1", "a2"]


def test_a_shutdown_can_drop_queued_work_and_says_how_much() -> None:
    queues: OrderedQueues[int] = OrderedQueues(1, "test-queues")
    release = threading.Event()
    started = threading.Event()
    done: list[int] = []

    def first() -> None:
        started.set()
        release.wait(5)

    queues.submit(1, first)
    assert started.wait(5)
    queues.submit(1, lambda: done.append(1))
    queues.submit(1, lambda: done.append(2))
    assert queues.shutdown(drop_pending=True) == 2
    release.set()
    queues.submit(2, lambda: done.append(3))  # after the shutdown: dropped, not raised
    time.sleep(0.1)
    assert done == [] and not queues.busy(2)


def test_failing_work_does_not_stop_the_queue() -> None:
    queues: OrderedQueues[str] = OrderedQueues(1, "test-queues")
    finished = threading.Event()

    def fail() -> None:
        raise RuntimeError("boom")

    queues.submit("k", fail)
    queues.submit("k", finished.set)
    assert finished.wait(5)
    queues.shutdown()

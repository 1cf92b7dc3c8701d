"""Lanes on their own: width bounds computing work, a remote wait gives the slot back, a run back
from its wait goes before queued work, and queued work can be withdrawn before it starts."""

from __future__ import annotations

import threading

from iris_runtime.engine.lanes import Lanes, LaneSlot


def test_width_priority_and_withdrawal() -> None:
    lanes = Lanes({"main": 1})
    order: list[str] = []
    remote = threading.Event()  # the "sub-agent" answers when set
    back = threading.Event()

    def delegating(slot: LaneSlot) -> None:
        order.append("delegate: asks")
        with slot.off_lane():
            remote.wait(10)
        order.append("delegate: back")
        back.set()

    def computing(name: str, release: threading.Event) -> None:
        order.append(f"{name}: runs")
        release.wait(10)

    first_done = threading.Event()
    lanes.submit("main", delegating)
    # The delegation waits off the lane, so this one gets the only slot.
    lanes.submit("main", lambda slot: (computing("first", first_done), None)[1])
    queued = lanes.submit("main", lambda slot: order.append("queued: runs"))
    withdrawn = lanes.submit("main", lambda slot: order.append("never"))
    assert withdrawn.withdraw() and not withdrawn.withdraw()

    remote.set()  # the delegation is back, but "first" holds the slot
    assert not back.wait(0.3)
    first_done.set()  # the slot frees: the returning delegation goes before "queued"
    assert back.wait(5)
    assert lanes.join(5)
    assert not queued.withdraw()  # it ran
    assert order == [
        "delegate: asks",
        "first: runs",
        "delegate: back",
        "queued: runs",
    ]


def test_an_aborted_return_carries_on_without_a_slot() -> None:
    lanes = Lanes({"main": 1})
    abort = threading.Event()
    hold = threading.Event()
    finished = threading.Event()

    def delegating(slot: LaneSlot) -> None:
        with slot.off_lane(abort):
            abort.set()  # stopped while away; the slot is taken meanwhile
            lanes.submit("main", lambda s: hold.wait(10))
            threading.Event().wait(0.2)
        finished.set()

    lanes.submit("main", delegating)
    threading.Event().wait(0.1)
    lanes.wake()
    assert finished.wait(5)  # it did not wait for the busy slot
    hold.set()
    assert lanes.join(5)

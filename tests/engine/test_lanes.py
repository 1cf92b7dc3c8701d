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


def test_a_stop_wakes_a_run_waiting_to_come_back_and_the_width_holds() -> None:
    lanes = Lanes({"main": 1})
    abort = threading.Event()
    away = threading.Event()
    hold = threading.Event()
    came_back = threading.Event()
    running: list[int] = []
    most = [0]
    lock = threading.Lock()

    def delegating(slot: LaneSlot) -> None:
        with slot.off_lane(abort):
            away.set()
            hold.wait(10)  # meanwhile another run takes the only slot
        came_back.set()

    def busy(slot: LaneSlot) -> None:
        with lock:
            running.append(1)
            most[0] = max(most[0], len(running))
        hold.wait(10)
        threading.Event().wait(0.05)
        with lock:
            running.pop()

    lanes.submit("main", delegating)
    assert away.wait(5)
    lanes.submit("main", busy)
    threading.Event().wait(0.1)
    hold.set()  # the delegation returns while "busy" still holds the slot...
    threading.Event().wait(0.01)
    abort.set()
    lanes.wake()  # ...and the stop wakes it: it finishes without waiting for the slot
    assert came_back.wait(5)
    for _ in range(3):  # the slot it gave up is still the only one
        lanes.submit("main", busy)
    assert lanes.join(5)
    assert most[0] == 1

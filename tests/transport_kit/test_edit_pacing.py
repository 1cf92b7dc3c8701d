"""The edit pacer shared by the Slack and Telegram transports: the three ways to take a slot and
what each does when the wait is cut short. The plugins' own tests cover the interval rules."""

from __future__ import annotations

import threading

from iris_runtime.transport_kit.edit_pacing import EditPacer


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_slot_cut_short_still_lets_the_edit_go() -> None:
    clock = ManualClock()
    pacer = EditPacer(1.0, clock=clock)
    with pacer.slot("C1", lambda seconds: None):
        pass
    entered: list[str] = []
    with pacer.slot("C1", lambda seconds: True):  # stopping: no waiting for the interval
        entered.append("edit")
        assert pacer.reserve("C1") > 0  # ...but the slot is held while the edit is out
    assert entered == ["edit"]
    assert pacer.reserve("C1") == 1.0  # and the interval restarts from its answer


def test_waiting_for_a_slot_gives_up_when_the_sleep_is_cut_short() -> None:
    clock = ManualClock()
    pacer = EditPacer(1.0, clock=clock)
    assert pacer.reserve("42") == 0.0
    pacer.done("42")
    assert pacer.wait_and_reserve("42", lambda seconds: True) is False
    clock.now += 1.0
    assert pacer.reserve("42") == 0.0  # nothing was taken by the attempt that gave up


def test_an_answer_wakes_the_edit_waiting_behind_it() -> None:
    pacer = EditPacer(0.0)
    assert pacer.reserve("7") == 0.0
    taken = threading.Event()

    def wait() -> None:
        if pacer.wait_and_reserve("7"):
            taken.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert not taken.wait(0.1)  # the first edit is still in flight
    pacer.done("7")
    assert taken.wait(5)
    waiter.join(5)


def test_the_hint_ignores_an_edit_in_flight_and_counts_from_the_last_answer() -> None:
    clock = ManualClock()
    pacer = EditPacer(1.0, clock=clock)
    assert pacer.wait_hint("C1") == 0.0
    assert pacer.reserve("C1") == 0.0
    assert pacer.wait_hint("C1") == 0.0
    clock.now += 0.3
    pacer.done("C1")
    clock.now += 0.5
    assert pacer.wait_hint("C1") == 0.5

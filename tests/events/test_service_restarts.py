"""The event service on a ManualClock across crashes and restarts: a run that happened is never
repeated, an accepted run that never started is delivered again, an event waiting for a full
queue is not lost, and start-up reads only the injected clock. Real files, a real state.db;
only time is simulated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from iris_runtime.events.state import FiringStore
from tests.events.conftest import START, Harness, immediate, one_shot


class Crash(BaseException):
    """Stands for the process dying at that exact point."""


def crash_on_remove(path: object) -> None:
    raise Crash(str(path))


def test_a_crash_between_acceptance_and_removal_does_not_run_it_twice(
    harness: Harness,
) -> None:
    first = harness.service(remove_file=crash_on_remove)
    path = harness.write("events/once.json", immediate(text="exactly once"))
    with pytest.raises(Crash):
        harness.step(first)
    assert len(harness.transport.accepted) == 1
    [leftover] = path.parent.iterdir()  # taken aside to be removed when the crash came
    assert leftover.name.startswith(".consuming-") and leftover.name.endswith(".once.json.tmp")
    harness.services.remove(first)  # it "died": no orderly stop

    second = harness.service()  # the run is in the channel's log: it ran
    assert list(path.parent.iterdir()) == [], "the leftover file is removed at start-up"
    harness.step(second, 60)
    assert len(harness.transport.accepted) == 1


def test_an_accepted_run_lost_before_it_started_is_delivered_again(harness: Harness) -> None:
    first = harness.service(remove_file=crash_on_remove)
    path = harness.write("events/lost.json", immediate(text="do not lose me"))
    with pytest.raises(Crash):
        harness.step(first)
    harness.services.remove(first)
    lost = harness.transport.accepted.pop()  # the queue died with the process: it never ran

    second = harness.service()
    assert not path.exists()
    harness.step(second)
    assert harness.transport.texts() == [lost.text]
    harness.step(second, 60)
    assert len(harness.transport.accepted) == 1


def test_a_crash_while_waiting_for_a_full_queue_loses_nothing(harness: Harness) -> None:
    first = harness.service()
    harness.transport.refuse = True
    path = harness.write("events/patient.json", one_shot("2024-06-01T12:00:30Z"))
    harness.step(first, 60)
    harness.services.remove(first)  # dies while the event waits
    harness.transport.refuse = False
    second = harness.service()
    harness.step(second)
    assert len(harness.transport.accepted) == 1 and not path.exists()
    [text] = harness.transport.texts()
    assert text.startswith("[EVENT:events/patient.json:one-shot:2024-06-01T12:00:30+00:00]")


def test_an_event_rewritten_while_iris_was_down_runs_as_rewritten(harness: Harness) -> None:
    first = harness.service()
    harness.transport.refuse = True
    harness.write("events/draft.json", immediate(text="first draft"))
    harness.step(first)
    first.stop()
    harness.services.remove(first)
    harness.write("events/draft.json", immediate(text="final text"))
    harness.transport.refuse = False
    second = harness.service()
    harness.step(second)
    harness.step(second, 60)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["final text"]
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    assert [f.state for f in store.unsettled()] == ["done"]
    store.close()


def test_restarts_never_repeat_a_run_that_happened(harness: Harness) -> None:
    harness.write("events/now.json", immediate())
    harness.write("events/soon.json", one_shot("2024-06-01T12:05:00Z"))
    service = harness.service()
    harness.step(service)
    harness.step(service, 600)
    service.stop()
    for _ in range(3):
        service = harness.service()
        harness.step(service, 60)
        service.stop()
    assert len(harness.transport.accepted) == 2


def test_start_up_and_firing_use_the_injected_clock_only(harness: Harness) -> None:
    service = harness.service()
    harness.write("events/x.json", one_shot((START + timedelta(days=3)).isoformat()))
    harness.step(service)
    harness.clock.advance(3 * 86400)
    service.tick()
    assert len(harness.transport.accepted) == 1

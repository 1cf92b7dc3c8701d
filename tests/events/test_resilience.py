"""Delivery when something else fails: ``state.db`` locked or failing, a channel that raises
instead of taking a run, Iris shutting down, a channel log that cannot be read at start-up, and
runs that never went to their end. Nothing is lost, nothing runs twice, and each outage is
logged once, with its reason."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from iris_runtime.errors import EngineStopping
from iris_runtime.events.delivery import MAX_FAILURES
from iris_runtime.events.files import EventSpec, Folder
from iris_runtime.events.recovery import VERIFY_RETRY_SECONDS
from iris_runtime.events.service import EventService
from iris_runtime.events.state import FiringStore
from iris_runtime.events.watcher import Watcher
from tests.events.conftest import FakeTransport, Harness, immediate, one_shot, periodic

Failing = Callable[..., Any]


class Recorder:
    """A watcher's sink that schedules nothing."""

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> None:
        return None

    def on_gone(self, rel: str) -> None:
        return None


@contextmanager
def failing_once(
    service: EventService, method: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[int]]:
    """``state.db``'s ``method`` raises "database is locked" the first time it is called."""
    real = getattr(service._store, method)
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(service._store, method, flaky)
    yield calls


def texts(harness: Harness) -> list[str]:
    return [t.split("] ", 1)[1] for t in harness.transport.texts()]


# -- state.db failing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "taken"), [("get_many", False), ("put", False), ("set_state", True)]
)
def test_a_due_one_shot_survives_a_database_failure(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, method: str, taken: bool
) -> None:
    service = harness.service()
    path = harness.write("events/call.json", one_shot("2024-06-01T12:00:30Z", text="call"))
    harness.step(service)
    with failing_once(service, method, monkeypatch) as calls:
        harness.clock.advance(31)
        with pytest.raises(sqlite3.OperationalError):
            service.tick()  # the firing thread logs this and tries again
        assert calls and path.exists()
        if taken:  # accepted by the queue, then recording that failed: it is not offered again
            assert texts(harness) == ["call"] and service.waiting() == {}
        else:
            assert texts(harness) == [] and service.waiting() == {"events/call.json": "C1"}
        harness.step(service, 1)
    assert texts(harness) == ["call"] and not path.exists()
    harness.step(service, 3600)
    assert texts(harness) == ["call"]


def test_a_run_delivered_again_survives_a_database_failure(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = harness.service()
    harness.write("events/lost.json", immediate(text="do not lose me"))
    harness.step(first)
    first.stop()
    harness.transport.accepted.clear()  # the queue died with the process: it never ran
    second = harness.service()
    with failing_once(second, "put", monkeypatch):
        with pytest.raises(sqlite3.OperationalError):
            second.tick()
        harness.step(second, 1)
    assert texts(harness) == ["do not lose me"]


@pytest.mark.timeout(30)  # the bug was a stall: everything waited for the database
def test_a_slow_database_stalls_neither_the_watcher_nor_the_api(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = harness.service()
    harness.write("events/now.json", immediate(text="first"))
    inside, release = threading.Event(), threading.Event()
    real = service._store.get_many

    def slow(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        release.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(service._store, "get_many", slow)
    service.scan_once()
    firing = threading.Thread(target=service.tick)
    firing.start()
    try:
        assert inside.wait(20)
        # While the firing pass waits on the database, the watcher schedules and the API reads.
        harness.write("events/later.json", one_shot("2024-06-01T13:00:00Z"))
        service.scan_once()
        assert service.next_time("events/later.json") is not None
        assert service.waiting() == {"events/now.json": "C1"}
    finally:
        release.set()
        firing.join()
    assert texts(harness) == ["first"]


# -- a channel that fails ----------------------------------------------------------------------


def test_a_failing_channel_is_logged_once_and_the_event_rejected_after_repeated_failures(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    service = harness.service()
    harness.transport.fail_with = RuntimeError("socket closed")
    path = harness.write("events/ping.json", immediate(text="ping"))
    harness.step(service)
    for _ in range(40):
        harness.step(service, 60)
    assert harness.transport.offers == MAX_FAILURES
    assert caplog.text.count("socket closed; retrying with backoff") == 1
    assert caplog.text.count("Traceback") <= 1
    assert path.exists(), "a rejected file is never deleted"
    reason = path.with_name("ping.json.error").read_text()
    assert "RuntimeError: socket closed" in reason and f"{MAX_FAILURES} times" in reason
    assert service.waiting() == {}

    # The channel recovers; touching (or editing) the file tries again, and its reason goes.
    harness.transport.fail_with = None
    harness.write("events/ping.json", immediate(text="ping"))
    harness.step(service, 1)
    assert texts(harness) == ["ping"] and not path.exists()
    assert not path.with_name("ping.json.error").exists()


def test_a_failing_head_does_not_hold_up_its_channel_for_ever(harness: Harness) -> None:
    class BrokenForOne(type(harness.transport)):  # type: ignore[misc]
        def enqueue_event(self, event: Any) -> bool:
            if event.text.endswith("poison"):
                self.offers += 1
                raise ValueError("cannot render")
            return bool(super().enqueue_event(event))

    harness.registry = type(harness.registry)()
    harness.transport = BrokenForOne()
    harness.registry.add(harness.transport, fallback=True)
    service = harness.service()
    harness.write("events/a.json", one_shot("2024-06-01T12:00:10Z", text="poison"))
    harness.write("events/b.json", one_shot("2024-06-01T12:00:20Z", text="after it"))
    harness.step(service)
    harness.step(service, 30)
    assert texts(harness) == []
    for _ in range(10):
        harness.step(service, 60)
    assert texts(harness) == ["after it"]
    assert "cannot render" in (harness.data_dir / "events/a.json.error").read_text()


def test_a_periodic_instant_its_channel_kept_failing_is_skipped_not_the_event(
    harness: Harness,
) -> None:
    service = harness.service()
    harness.transport.fail_with = RuntimeError("down")
    harness.write("events/hourly.json", periodic("0 * * * *"))
    harness.step(service)
    harness.step(service, 3600)
    for _ in range(10):
        harness.step(service, 60)
    assert harness.transport.offers == MAX_FAILURES
    assert not (harness.data_dir / "events/hourly.json.error").exists()
    harness.transport.fail_with = None
    harness.step(service, 3000)  # 14:00
    assert harness.transport.texts() == [
        "[EVENT:events/hourly.json:periodic:2024-06-01T14:00:00+00:00] digest"
    ]


def test_iris_shutting_down_is_not_a_failure_and_the_event_runs_after_restart(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="iris_runtime.events")
    first = harness.service()
    harness.transport.fail_with = EngineStopping("Iris is shutting down")
    path = harness.write("events/late.json", immediate(text="after restart"))
    harness.step(first)
    for _ in range(3 * MAX_FAILURES):
        harness.step(first, 60)
    assert not path.with_name("late.json.error").exists() and path.exists()
    assert caplog.text.count("Iris is shutting down;") == 1
    assert "Traceback" not in caplog.text
    first.stop()
    harness.transport.fail_with = None
    second = harness.service()
    harness.step(second)
    assert texts(harness) == ["after restart"] and not path.exists()


# -- start-up verification -------------------------------------------------------------------


class Unreadable:
    """A channel log that cannot be read until ``readable`` is set."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.readable = False

    def __call__(self, channel: str) -> list[dict[str, Any]]:
        if not self.readable:
            raise PermissionError("cannot read log")
        return self.harness.transport.log(channel)


def test_an_unreadable_log_at_start_up_neither_reruns_nor_drops_a_run(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    first = harness.service()
    harness.write("events/hello.json", immediate(text="once"))
    harness.write("events/lost.json", immediate(text="lost in the queue"))
    harness.step(first)
    first.stop()
    harness.transport.accepted.pop()  # the second never ran: its queue died with Iris

    log = Unreadable(harness)
    second = harness.service(channel_log=log)
    harness.step(second)
    harness.step(second, VERIFY_RETRY_SECONDS / 2)
    assert texts(harness) == ["once"], "neither re-run nor delivered again while unverified"
    assert "cannot read C1's log" in caplog.text
    log.readable = True
    harness.step(second, VERIFY_RETRY_SECONDS)
    harness.step(second, 1)
    assert texts(harness) == ["once", "lost in the queue"]
    harness.step(second, 3600)
    second.stop()
    harness.service()
    assert texts(harness) == ["once", "lost in the queue"]


def test_a_pending_file_waits_for_its_log_to_be_readable_then_runs_once(
    harness: Harness,
) -> None:
    first = harness.service()
    harness.transport.refuse = True
    path = harness.write("events/patient.json", immediate(text="patient"))
    harness.step(first)
    first.stop()
    harness.transport.refuse = False
    log = Unreadable(harness)
    second = harness.service(channel_log=log)
    harness.step(second)
    harness.step(second, 1)
    assert texts(harness) == [] and path.exists()
    log.readable = True
    harness.step(second, VERIFY_RETRY_SECONDS)
    harness.step(second, 1)
    assert texts(harness) == ["patient"] and not path.exists()


@pytest.mark.parametrize(("ended", "runs"), [("done", 1), ("stopped", 2), (None, 2), ("failed", 2)])
def test_only_a_run_that_went_to_its_end_counts_as_run(
    harness: Harness, ended: str | None, runs: int
) -> None:
    harness.transport.outcome["wake"] = ended
    first = harness.service()
    harness.write("events/wake.json", immediate(text="wake"))
    harness.step(first)
    first.stop()
    harness.transport.outcome.clear()  # the next run goes to its end
    second = harness.service()
    harness.step(second)
    harness.step(second, 60)
    second.stop()
    assert texts(harness) == ["wake"] * runs
    third = harness.service()
    harness.step(third, 60)
    assert texts(harness) == ["wake"] * runs


def test_a_run_that_never_goes_to_its_end_is_given_up_and_settled(harness: Harness) -> None:
    harness.transport.outcome["crashy"] = "stopped"
    for _ in range(5):
        service = harness.service()
        if not harness.transport.accepted:
            harness.write("events/crashy.json", immediate(text="crashy"))
        harness.step(service)
        service.stop()
    assert texts(harness) == ["crashy"] * 3
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    assert store.unsettled() == [], "given up for good: not looked at on every start"
    store.close()


def test_a_run_delivered_again_keeps_its_deliveries_over_restarts_that_never_reach_a_queue(
    harness: Harness,
) -> None:
    """Cut short after its file was consumed, then two starts that stop before its queue takes
    the re-delivery: neither counts as a delivery, so the run is still delivered (it was given
    up as delivered three times, and before that forgotten as a file deleted meanwhile)."""
    harness.transport.outcome["wake"] = "stopped"
    first = harness.service()
    path = harness.write("events/wake.json", immediate(text="wake"))
    harness.step(first)
    first.stop()
    assert texts(harness) == ["wake"] and not path.exists()
    harness.transport.outcome.clear()
    harness.transport.fail_with = EngineStopping("Iris is shutting down")
    for _ in range(2):
        stopping = harness.service()
        harness.step(stopping)
        stopping.stop()
    harness.transport.fail_with = None
    last = harness.service()
    harness.step(last)
    harness.step(last, 60)
    assert texts(harness) == ["wake", "wake"]


# -- what would otherwise only grow ------------------------------------------------------------

WEEK = 7 * 24 * 3600.0


def firing_count(harness: Harness) -> int:
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    try:
        return store.count()
    finally:
        store.close()


def test_records_of_rejected_and_given_up_firings_are_pruned_after_a_week(
    harness: Harness,
) -> None:
    # A firing left pending whose file is rejected after the restart (its transport is gone).
    claimed = FakeTransport("tg", prefix="tg-", refuse=True)
    harness.registry.add(claimed)
    first = harness.service()
    harness.write("events/orphaned.json", immediate(channel="tg-1", text="orphaned"))
    # A run that never goes to its end, given up after three deliveries.
    harness.transport.outcome["crashy"] = "stopped"
    harness.write("events/crashy.json", immediate(text="crashy"))
    harness.step(first)
    first.stop()
    harness.registry = type(harness.registry)()
    harness.transport.prefix = "C"  # nobody owns tg-1 now
    harness.registry.add(harness.transport, fallback=True)
    for _ in range(3):
        service = harness.service()
        harness.step(service)
        service.stop()
    assert texts(harness) == ["crashy"] * 3
    assert (harness.data_dir / "events/orphaned.json.error").exists()
    assert firing_count(harness) == 2

    service = harness.service()
    harness.step(service, WEEK - 3600)
    assert firing_count(harness) == 2, "kept for a week"
    harness.step(service, 2 * 3600)
    assert firing_count(harness) == 0


def test_an_event_waiting_longer_than_a_week_keeps_its_record(harness: Harness) -> None:
    service = harness.service()
    harness.transport.refuse = True
    harness.write("events/patient.json", immediate(text="patient"))
    harness.step(service)
    for _ in range(8 * 24):
        harness.step(service, 3600)
    assert firing_count(harness) == 1
    harness.transport.refuse = False
    harness.step(service, 5)
    assert texts(harness) == ["patient"]


def test_names_noted_once_are_forgotten_when_they_go(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="iris_runtime.events")
    service = harness.service()
    notes = harness.write("events/notes.txt", "not an event")
    harness.step(service)
    harness.step(service, 1)
    assert caplog.text.count("ignoring events/notes.txt") == 1
    notes.unlink()
    harness.step(service, 1)
    harness.write("events/notes.txt", "back again")
    harness.step(service, 1)
    assert caplog.text.count("ignoring events/notes.txt") == 2


def test_a_folder_stamped_in_the_future_is_not_rescanned_on_every_poll(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = harness.data_dir / "events"
    folder.mkdir()
    harness.write("events/daily.json", periodic("0 9 * * *"))
    future = time.time_ns() + 3600 * 10**9
    os.utime(folder, ns=(future, future))
    watcher = Watcher(harness.data_dir, [Folder("events")], Recorder(), harness.clock)
    watcher.scan_once()
    scans: list[object] = []
    real = os.scandir

    def counting(path: Any) -> Any:
        scans.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    for _ in range(10):
        watcher.poll_once()
    assert scans == []

"""The event service on a ManualClock firing each event type (immediate, one-shot, periodic) at
its time, through edits, deletions, downtime and DST. Real files, a real state.db; only time is
simulated."""

from __future__ import annotations

from datetime import UTC, datetime

from iris_runtime.events.state import FiringStore
from tests.events.conftest import START, Harness, immediate, one_shot, periodic

# -- immediate -----------------------------------------------------------------------------------


def test_an_immediate_event_runs_once_and_its_file_is_then_removed(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/hello.json", immediate(text="say hi"))
    harness.step(service)
    picked = START.isoformat(timespec="seconds")
    assert harness.transport.texts() == [f"[EVENT:events/hello.json:immediate:{picked}] say hi"]
    event = harness.transport.accepted[0]
    assert event.channel == "C1" and event.user == "event"
    assert not path.exists()
    harness.step(service, 60)
    assert len(harness.transport.accepted) == 1
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    [firing] = store.unsettled()  # done, and verified only once seen in a log by the next start
    assert firing.state == "done" and firing.event == "events/hello.json"
    store.close()


def test_the_same_immediate_file_dropped_again_runs_again(harness: Harness) -> None:
    service = harness.service()
    for _ in range(2):
        harness.write("events/again.json", immediate(text="ping"))
        harness.step(service)
        harness.step(service)
    assert len(harness.transport.accepted) == 2


# -- one-shot ------------------------------------------------------------------------------------


def test_a_one_shot_fires_at_its_instant_in_its_own_offset(harness: Harness) -> None:
    service = harness.service()
    at = "2024-06-01T14:30:00+02:00"  # 12:30 UTC
    path = harness.write("events/call.json", one_shot(at, text="call Bob"))
    harness.step(service, 29 * 60)
    assert harness.transport.accepted == [] and path.exists()
    harness.step(service, 60)
    assert harness.transport.texts() == [f"[EVENT:events/call.json:one-shot:{at}] call Bob"]
    assert not path.exists()


def test_a_one_shot_a_year_ahead_waits_the_whole_year(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/anniversary.json", one_shot("2025-06-01T12:00:00Z"))
    harness.step(service)
    assert service.next_time("events/anniversary.json") == datetime(2025, 6, 1, 12, tzinfo=UTC)
    for day in range(364):
        harness.step(service, 86400)
        assert harness.transport.accepted == [], f"fired early, on day {day + 1}"
    harness.clock.set(datetime(2025, 6, 1, 11, 59, 59, tzinfo=UTC))
    harness.step(service)
    assert harness.transport.accepted == [] and path.exists()
    harness.step(service, 1)
    assert len(harness.transport.accepted) == 1 and not path.exists()


def test_a_one_shot_missed_during_downtime_fires_once_at_start_marked_late(
    harness: Harness,
) -> None:
    path = harness.write("events/missed.json", one_shot("2024-06-01T09:00:00Z", text="standup"))
    service = harness.service()  # Iris starts at 12:00, three hours late
    harness.step(service)
    [text] = harness.transport.texts()
    assert text.startswith("[EVENT:events/missed.json:one-shot:2024-06-01T09:00:00+00:00] (late:")
    assert text.endswith("standup")
    assert not path.exists()
    harness.step(service, 3600)
    assert len(harness.transport.accepted) == 1


def test_a_one_shot_deleted_before_it_fires_is_cancelled(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/later.json", one_shot("2024-06-01T13:00:00Z"))
    harness.step(service)
    assert service.next_time("events/later.json") is not None
    path.unlink()
    harness.step(service)
    assert service.next_time("events/later.json") is None
    harness.step(service, 7200)
    assert harness.transport.accepted == []


def test_a_one_shot_moved_later_fires_at_the_new_time_only(harness: Harness) -> None:
    service = harness.service()
    harness.write("events/move.json", one_shot("2024-06-01T12:10:00Z"))
    harness.step(service)
    harness.write("events/move.json", one_shot("2024-06-01T12:20:00Z"))
    harness.step(service, 60)
    harness.step(service, 10 * 60)
    assert harness.transport.accepted == []
    harness.step(service, 10 * 60)
    assert len(harness.transport.accepted) == 1


# -- periodic ------------------------------------------------------------------------------------


def test_a_periodic_event_fires_at_each_instant_and_keeps_its_file(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/tick.json", periodic("*/15 * * * *", text="check"))
    harness.step(service)
    for _ in range(4):
        harness.step(service, 15 * 60)
    assert harness.transport.texts() == [
        f"[EVENT:events/tick.json:periodic:2024-06-01T{t}:00+00:00] check"
        for t in ("12:15", "12:30", "12:45", "13:00")
    ]
    assert path.exists()


def test_periodic_runs_missed_while_down_are_not_replayed(harness: Harness) -> None:
    harness.write("events/hourly.json", periodic("0 * * * *"))
    service = harness.service()
    harness.step(service)
    service.stop()
    harness.clock.advance(5 * 3600)  # Iris is down from 12:00 to 17:00
    service = harness.service()
    harness.step(service)
    assert harness.transport.accepted == []
    harness.step(service, 3600)
    assert harness.transport.texts() == [
        "[EVENT:events/hourly.json:periodic:2024-06-01T18:00:00+00:00] digest"
    ]


def test_a_periodic_event_follows_its_timezone_across_dst(harness: Harness) -> None:
    harness.clock.set(datetime(2024, 3, 29, 12, 0, tzinfo=UTC))
    service = harness.service()
    harness.write("events/morning.json", periodic("0 9 * * *", "Europe/Berlin", text="coffee"))
    harness.write("events/night.json", periodic("30 2 * * *", "Europe/Berlin", text="backup"))
    harness.step(service)
    for _ in range(8 * 24):  # to 2024-04-02 12:00 UTC; DST starts on 31 March
        harness.step(service, 1800)
    assert harness.transport.texts() == [
        "[EVENT:events/night.json:periodic:2024-03-30T02:30:00+01:00] backup",
        "[EVENT:events/morning.json:periodic:2024-03-30T09:00:00+01:00] coffee",
        # 02:30 does not exist on 31 March in Berlin: that night has no backup.
        "[EVENT:events/morning.json:periodic:2024-03-31T09:00:00+02:00] coffee",
        "[EVENT:events/night.json:periodic:2024-04-01T02:30:00+02:00] backup",
        "[EVENT:events/morning.json:periodic:2024-04-01T09:00:00+02:00] coffee",
        "[EVENT:events/night.json:periodic:2024-04-02T02:30:00+02:00] backup",
        "[EVENT:events/morning.json:periodic:2024-04-02T09:00:00+02:00] coffee",
    ]


def test_a_timezone_changed_at_dst_reschedules_the_event(harness: Harness) -> None:
    # Between the US (10 March) and EU (31 March) switches, New York is 4 h behind Berlin's 5.
    harness.clock.set(datetime(2024, 3, 20, 0, 0, tzinfo=UTC))
    service = harness.service()
    harness.write("events/tz.json", periodic("0 9 * * *", "America/New_York"))
    harness.step(service)
    assert service.next_time("events/tz.json") == datetime(2024, 3, 20, 13, tzinfo=UTC)
    harness.write("events/tz.json", periodic("0 9 * * *", "Europe/Berlin"))
    harness.step(service)
    assert service.next_time("events/tz.json") == datetime(2024, 3, 20, 8, tzinfo=UTC)
    harness.step(service, 8 * 3600)
    assert harness.transport.texts() == [
        "[EVENT:events/tz.json:periodic:2024-03-20T09:00:00+01:00] digest"
    ]


def test_a_periodic_file_edited_while_scheduled_is_rescheduled(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/edit.json", periodic("0 13 * * *", text="old"))
    harness.step(service)
    assert service.next_time("events/edit.json") == datetime(2024, 6, 1, 13, tzinfo=UTC)
    harness.write("events/edit.json", periodic("30 12 * * *", text="new"))
    harness.step(service)
    assert service.next_time("events/edit.json") == datetime(2024, 6, 1, 12, 30, tzinfo=UTC)
    harness.step(service, 1800)
    harness.step(service, 1800)  # 13:00, the old time: nothing
    assert harness.transport.texts() == [
        "[EVENT:events/edit.json:periodic:2024-06-01T12:30:00+00:00] new"
    ]
    path.unlink()
    harness.step(service, 86400)
    assert len(harness.transport.accepted) == 1


def test_touching_a_periodic_file_without_changing_it_keeps_its_schedule(
    harness: Harness,
) -> None:
    service = harness.service()
    path = harness.write("events/same.json", periodic("0 * * * *"))
    harness.step(service)
    before = path.read_bytes()
    harness.step(service, 3599)
    path.write_bytes(before)  # same content, new mtime
    harness.step(service, 1)
    assert len(harness.transport.accepted) == 1

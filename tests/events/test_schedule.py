"""The timetable: one-shots, periodic entries, missed runs, edits and scale, on a ManualClock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from iris_runtime.errors import InvalidInput
from iris_runtime.events.cron import CronSchedule
from iris_runtime.events.schedule import Due, ManualClock, SystemClock, Timetable

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
START = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


def make() -> tuple[ManualClock, Timetable]:
    clock = ManualClock(START)
    return clock, Timetable(clock)


def every(expr: str) -> CronSchedule:
    return CronSchedule.parse(expr)


# --- clocks ----------------------------------------------------------------------------------


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(datetime(2024, 6, 1, 14, 0, tzinfo=ZoneInfo("Europe/Berlin")))
    assert clock.now() == datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    assert clock.now().tzinfo is UTC
    assert clock.advance(90) == datetime(2024, 6, 1, 12, 1, 30, tzinfo=UTC)
    clock.set(START)
    assert clock.now() == START
    with pytest.raises(ValueError):
        clock.set(datetime(2024, 1, 1))
    with pytest.raises(ValueError):
        ManualClock(datetime(2024, 1, 1))


def test_system_clock_is_aware_utc() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC
    assert abs((now - datetime.now(UTC)).total_seconds()) < 60


# --- one-shots -------------------------------------------------------------------------------


def test_empty_timetable() -> None:
    _, table = make()
    assert table.next_wakeup() is None
    assert table.due() == []
    assert len(table) == 0


def test_one_shot_fires_once_at_its_time() -> None:
    clock, table = make()
    at = START + timedelta(minutes=10)
    table.add_one_shot("remind", at)
    assert table.next_wakeup() == at
    clock.advance(599)
    assert table.due() == []
    clock.advance(1)
    assert table.due() == [Due("remind", "one-shot", at, late=False)]
    assert table.due() == []
    assert "remind" not in table
    assert table.next_wakeup() is None


def test_one_shot_a_year_ahead() -> None:
    clock, table = make()
    at = START + timedelta(days=400, seconds=7)
    table.add_one_shot("anniversary", at)
    # No timer-width limit: the wakeup is simply the absolute time.
    assert table.next_wakeup() == at
    clock.set(at - timedelta(microseconds=1))
    assert table.due() == []
    clock.set(at)
    assert [d.id for d in table.due()] == ["anniversary"]


def test_one_shot_in_other_timezone_is_normalised_to_utc() -> None:
    _, table = make()
    table.add_one_shot("x", datetime(2024, 6, 1, 10, 0, tzinfo=NEW_YORK))
    assert table.next_wakeup() == datetime(2024, 6, 1, 14, 0, tzinfo=UTC)
    with pytest.raises(ValueError):
        table.add_one_shot("naive", datetime(2024, 6, 1))


def test_past_one_shot_fires_at_startup_and_is_late() -> None:
    _, table = make()
    table.add_one_shot("missed", START - timedelta(hours=3))
    table.add_one_shot("just-now", START - timedelta(seconds=30))  # within the 60 s grace
    due = table.due()
    assert [(d.id, d.late) for d in due] == [("missed", True), ("just-now", False)]
    assert table.due() == []


def test_grace_is_configurable() -> None:
    clock = ManualClock(START)
    table = Timetable(clock, grace=timedelta(seconds=10))
    table.add_one_shot("x", START - timedelta(seconds=30))
    assert table.due()[0].late


def test_one_shot_added_on_time_but_collected_late_is_not_late() -> None:
    clock, table = make()
    table.add_one_shot("x", START + timedelta(minutes=1))
    clock.advance(3600)
    assert table.due()[0].late is False


# --- periodic --------------------------------------------------------------------------------


def test_periodic_fires_each_time_and_reschedules() -> None:
    clock, table = make()
    table.add_periodic("tick", every("*/5 * * * *"), UTC_ZONE)
    # Strictly after "now": 12:00 itself is not a fire time for an entry added at 12:00.
    assert table.next_wakeup() == START + timedelta(minutes=5)
    fired = []
    for _ in range(3):
        wake = table.next_wakeup()
        assert wake is not None
        clock.set(wake)
        fired.extend(table.due())
    assert [d.scheduled.minute for d in fired] == [5, 10, 15]
    assert all(d.kind == "periodic" and not d.late for d in fired)
    assert table.next_wakeup() == START + timedelta(minutes=20)


def test_missed_periodic_runs_fire_once_for_the_latest() -> None:
    clock, table = make()
    table.add_periodic("tick", every("*/5 * * * *"), UTC_ZONE)
    clock.advance(3 * 3600 + 120)  # down for three hours: 36 times missed, now 15:02
    due = table.due()
    assert len(due) == 1
    assert due[0].scheduled == datetime(2024, 6, 1, 15, 0, tzinfo=UTC)
    assert due[0].late is True  # reported 2 minutes after its time, past the grace
    assert table.next_wakeup() == datetime(2024, 6, 1, 15, 5, tzinfo=UTC)
    assert table.due() == []


def test_long_downtime_catch_up_is_cheap_and_correct() -> None:
    clock, table = make()
    table.add_periodic("minutely", every("* * * * *"), UTC_ZONE)
    table.add_periodic("burst", every("* 9 * * *"), UTC_ZONE)  # every minute 09:00-09:59
    clock.set(datetime(2025, 6, 1, 20, 30, 15, tzinfo=UTC))  # a year later
    started = time.perf_counter()
    due = {d.id: d.scheduled for d in table.due()}
    assert time.perf_counter() - started < 1.0  # sanity guard; a step-by-step walk would not be
    assert due == {
        "burst": datetime(2025, 6, 1, 9, 59, tzinfo=UTC),
        "minutely": datetime(2025, 6, 1, 20, 30, tzinfo=UTC),
    }
    assert table.next_time("burst") == datetime(2025, 6, 2, 9, 0, tzinfo=UTC)


def test_periodic_in_timezone_across_dst() -> None:
    clock = ManualClock(datetime(2024, 3, 9, 12, tzinfo=UTC))
    table = Timetable(clock)
    table.add_periodic("night", every("30 2 * * *"), NEW_YORK)
    # 02:30 does not exist on 2024-03-10 in New York: the next run is on the 11th (EDT).
    assert table.next_wakeup() == datetime(2024, 3, 11, 6, 30, tzinfo=UTC)
    clock.set(datetime(2024, 3, 11, 6, 30, tzinfo=UTC))
    assert [d.scheduled for d in table.due()] == [datetime(2024, 3, 11, 6, 30, tzinfo=UTC)]
    assert table.next_time("night") == datetime(2024, 3, 12, 6, 30, tzinfo=UTC)


def test_due_with_explicit_now_and_time_order() -> None:
    _, table = make()
    table.add_one_shot("b", START + timedelta(minutes=3))
    table.add_one_shot("a", START + timedelta(minutes=1))
    table.add_periodic("p", every("2-59/5 * * * *"), UTC_ZONE)  # 12:02, 12:07, ...
    due = table.due(START + timedelta(minutes=5))
    assert [d.id for d in due] == ["a", "p", "b"]
    with pytest.raises(ValueError):
        table.due(datetime(2024, 6, 1))


def test_periodic_that_never_fires_is_refused() -> None:
    table = Timetable(ManualClock(datetime(2033, 1, 1, tzinfo=UTC)))
    with pytest.raises(InvalidInput):
        table.add_periodic("never", every("0 0 29 2 */7"), UTC_ZONE)  # next Feb 29 Sunday: 2060
    assert "never" not in table


# --- removal and edits -----------------------------------------------------------------------


def test_remove_cancels() -> None:
    clock, table = make()
    table.add_one_shot("once", START + timedelta(minutes=1))
    table.add_periodic("tick", every("* * * * *"), UTC_ZONE)
    assert table.remove("once") is True
    assert table.remove("tick") is True
    assert table.remove("tick") is False
    clock.advance(3600)
    assert table.due() == []
    assert table.next_wakeup() is None
    assert len(table) == 0


def test_remove_earliest_moves_next_wakeup() -> None:
    _, table = make()
    table.add_one_shot("early", START + timedelta(minutes=1))
    table.add_one_shot("late", START + timedelta(minutes=2))
    table.remove("early")
    assert table.next_wakeup() == START + timedelta(minutes=2)


def test_edit_is_remove_plus_add_and_reschedules() -> None:
    clock, table = make()
    table.add_periodic("job", every("0 * * * *"), UTC_ZONE)
    assert table.next_wakeup() == START + timedelta(hours=1)
    table.remove("job")
    table.add_periodic("job", every("*/10 * * * *"), UTC_ZONE)
    assert table.next_wakeup() == START + timedelta(minutes=10)
    clock.advance(3600)
    due = table.due()
    # Only the new schedule fires, once, for 13:00; the old 13:00 heap item is stale.
    assert [(d.id, d.scheduled) for d in due] == [("job", START + timedelta(hours=1))]


def test_add_with_existing_id_replaces() -> None:
    clock, table = make()
    table.add_one_shot("x", START + timedelta(minutes=1))
    table.add_one_shot("x", START + timedelta(minutes=5))
    assert len(table) == 1
    assert table.next_wakeup() == START + timedelta(minutes=5)
    clock.advance(600)
    assert [d.scheduled for d in table.due()] == [START + timedelta(minutes=5)]


def test_many_edits_do_not_grow_the_heap_without_bound() -> None:
    _, table = make()
    for i in range(5000):
        table.add_one_shot("x", START + timedelta(minutes=i + 1))
    assert len(table) == 1
    assert len(table._heap) < 2100  # compacted; without it this would be 5000
    assert table.next_wakeup() == START + timedelta(minutes=5000)


# --- scale -----------------------------------------------------------------------------------


def test_ten_thousand_periodic_entries() -> None:
    clock, table = make()
    schedule = every("* * * * *")
    started = time.perf_counter()
    for i in range(10_000):
        table.add_periodic(f"e{i}", schedule, UTC_ZONE)
    assert len(table) == 10_000
    assert table.next_wakeup() == START + timedelta(minutes=1)
    clock.advance(60)
    due = table.due()
    elapsed = time.perf_counter() - started
    assert len(due) == 10_000
    assert len({d.id for d in due}) == 10_000
    assert {d.scheduled for d in due} == {START + timedelta(minutes=1)}
    assert table.next_wakeup() == START + timedelta(minutes=2)
    clock.advance(30)
    assert table.due() == []  # nothing due between minutes
    assert elapsed < 2.0  # sanity guard only


def test_due_touches_only_due_entries() -> None:
    clock, table = make()
    for i in range(10_000):
        table.add_one_shot(f"later{i}", START + timedelta(days=1, seconds=i))
    table.add_one_shot("soon", START + timedelta(seconds=5))
    clock.advance(5)
    assert [d.id for d in table.due()] == ["soon"]
    assert len(table) == 10_000

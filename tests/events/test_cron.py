"""Cron parsing (every syntax form and every error) and next_after, including DST edges."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from iris_runtime.errors import InvalidInput
from iris_runtime.events.cron import CronSchedule

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def times(expr: str, after: datetime, tz: ZoneInfo, count: int) -> list[datetime]:
    schedule = CronSchedule.parse(expr)
    found = []
    for _ in range(count):
        after = schedule.next_after(after, tz)
        found.append(after)
    return found


# --- parsing ---------------------------------------------------------------------------------


def test_star_means_every_value() -> None:
    s = CronSchedule.parse("* * * * *")
    assert s.minutes == tuple(range(60))
    assert s.hours == tuple(range(24))
    assert s.days == tuple(range(1, 32))
    assert s.months == tuple(range(1, 13))
    assert s.weekdays == tuple(range(7))
    assert s.dom_star and s.dow_star


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("5", (5,)),
        ("1-4", (1, 2, 3, 4)),
        ("*/15", (0, 15, 30, 45)),
        ("10-30/10", (10, 20, 30)),
        ("1,5,3", (1, 3, 5)),
        ("1-3,10-20/5,59", (1, 2, 3, 10, 15, 20, 59)),
        ("0-59/59", (0, 59)),
        ("*/100", (0,)),
    ],
)
def test_minute_forms(field: str, expected: tuple[int, ...]) -> None:
    assert CronSchedule.parse(f"{field} * * * *").minutes == expected


def test_month_names_case_insensitive_and_in_ranges() -> None:
    assert CronSchedule.parse("0 0 1 jan,Jun,DEC *").months == (1, 6, 12)
    assert CronSchedule.parse("0 0 1 MAR-may *").months == (3, 4, 5)
    assert CronSchedule.parse("0 0 1 jan-dec/3 *").months == (1, 4, 7, 10)


def test_weekday_names_and_sunday_as_seven() -> None:
    assert CronSchedule.parse("0 9 * * MON-FRI").weekdays == (1, 2, 3, 4, 5)
    assert CronSchedule.parse("0 9 * * sun,sat").weekdays == (0, 6)
    assert CronSchedule.parse("0 9 * * 7").weekdays == (0,)
    assert CronSchedule.parse("0 9 * * 5-7").weekdays == (0, 5, 6)
    assert CronSchedule.parse("0 9 * * 0,7").weekdays == (0,)
    assert CronSchedule.parse("0 9 * * FRI-7").weekdays == (0, 5, 6)
    # "*" in day-of-week covers 0-6 only, so a step does not count Sunday twice.
    assert CronSchedule.parse("0 9 * * */2").weekdays == (0, 2, 4, 6)


def test_day_fields_restriction_flags_follow_vixie() -> None:
    s = CronSchedule.parse("0 0 1 * MON")
    assert not s.dom_star and not s.dow_star
    # A field starting with "*" counts as unrestricted even with a step (Vixie cron behaviour).
    assert CronSchedule.parse("0 0 */2 * MON").dom_star


def test_whitespace_is_flexible() -> None:
    assert CronSchedule.parse("  0\t9  *   * 1-5 ").weekdays == (1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@MIDNIGHT", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_macros(macro: str, equivalent: str) -> None:
    got, want = CronSchedule.parse(macro), CronSchedule.parse(equivalent)
    assert (got.minutes, got.hours, got.days, got.months, got.weekdays) == (
        want.minutes,
        want.hours,
        want.days,
        want.months,
        want.weekdays,
    )


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("", "expression"),
        ("* * * *", "expression"),
        ("* * * * * *", "expression"),
        ("@reboot", "macro"),
        ("@every 5m", "macro"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 0 *", "month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("1,,2 * * * *", "minute"),
        ("1, * * * *", "minute"),
        (",1 * * * *", "minute"),
        ("* 5-2 * * *", "hour"),
        ("*/0 * * * *", "minute"),
        ("1-5/0 * * * *", "minute"),
        ("*/ * * * *", "minute"),
        ("*/x * * * *", "minute"),
        ("5/15 * * * *", "minute"),
        ("- * * * *", "minute"),
        ("1- * * * *", "minute"),
        ("-1 * * * *", "minute"),
        ("1-2-3 * * * *", "minute"),
        ("** * * * *", "minute"),
        ("? * * * *", "minute"),
        ("MON * * * *", "minute"),
        ("* * * * JAN", "day-of-week"),
        ("* * * JANUARY *", "month"),
        ("* * * * MONDAY", "day-of-week"),
        ("* * L * *", "day-of-month"),
        ("* * 15W * *", "day-of-month"),
        ("* * * * 5#3", "day-of-week"),
        ("\uff11 * * * *", "minute"),  # fullwidth digit one
        ("\u00b2 * * * *", "minute"),  # superscript two: isdigit() is True
        ("0 0 31 2 *", "day-of-month"),
        ("0 0 30,31 2 *", "day-of-month"),
        ("0 0 31 4,6,9,11 *", "day-of-month"),
        ("0 0 31 2 */2", "day-of-month"),
    ],
)
def test_invalid_expressions(expr: str, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        CronSchedule.parse(expr)
    assert info.value.code == "invalid_cron"
    assert f": {field}: " in info.value.message


def test_impossible_day_is_fine_when_weekday_can_fire_instead() -> None:
    # Both day fields restricted: OR rule, so the Fridays of February still fire.
    s = CronSchedule.parse("0 0 31 2 FRI")
    assert s.next_after(utc(2024, 1, 1), UTC_ZONE) == utc(2024, 2, 2)


# --- next_after: common schedules ------------------------------------------------------------


def test_every_five_minutes() -> None:
    assert times("*/5 * * * *", utc(2024, 5, 1, 12, 3, 20), UTC_ZONE, 3) == [
        utc(2024, 5, 1, 12, 5),
        utc(2024, 5, 1, 12, 10),
        utc(2024, 5, 1, 12, 15),
    ]


def test_strictly_after() -> None:
    s = CronSchedule.parse("*/5 * * * *")
    assert s.next_after(utc(2024, 5, 1, 12, 5), UTC_ZONE) == utc(2024, 5, 1, 12, 10)
    assert s.next_after(utc(2024, 5, 1, 12, 4, 59, 999999), UTC_ZONE) == utc(2024, 5, 1, 12, 5)


def test_hour_and_day_rollover() -> None:
    assert times("*/20 * * * *", utc(2024, 12, 31, 23, 45), UTC_ZONE, 2) == [
        utc(2025, 1, 1, 0, 0),
        utc(2025, 1, 1, 0, 20),
    ]


def test_weekdays_at_nine_in_new_york() -> None:
    # Friday 2024-09-06 10:00 EDT -> Monday 09:00 EDT (13:00 UTC), then Tuesday.
    assert times("0 9 * * MON-FRI", utc(2024, 9, 6, 14), NEW_YORK, 2) == [
        utc(2024, 9, 9, 13),
        utc(2024, 9, 10, 13),
    ]


def test_first_of_month() -> None:
    assert times("0 0 1 * *", utc(2024, 12, 15), UTC_ZONE, 3) == [
        utc(2025, 1, 1),
        utc(2025, 2, 1),
        utc(2025, 3, 1),
    ]
    # Midnight in Berlin is 23:00 UTC of the previous day in winter.
    assert times("0 0 1 * *", utc(2024, 12, 15), BERLIN, 1) == [utc(2024, 12, 31, 23)]


def test_vixie_or_rule() -> None:
    # 13th of the month OR any Friday (Sep 2024 starts on a Sunday; Oct 13 is a Sunday).
    days = [t.day for t in times("0 9 13 * FRI", utc(2024, 9, 1), UTC_ZONE, 8)]
    assert days == [6, 13, 20, 27, 4, 11, 13, 18]


def test_and_rule_when_one_day_field_is_star() -> None:
    # "*/2" day-of-month starts with "*": odd days that are also Mondays.
    found = times("0 0 */2 * MON", utc(2024, 9, 1), UTC_ZONE, 3)
    assert found == [utc(2024, 9, 9), utc(2024, 9, 23), utc(2024, 10, 7)]
    assert all(t.weekday() == 0 and t.day % 2 == 1 for t in found)


def test_leap_day_is_found_quickly_years_ahead() -> None:
    s = CronSchedule.parse("0 0 29 2 *")
    started = time.perf_counter()
    assert s.next_after(utc(2024, 3, 1), UTC_ZONE) == utc(2028, 2, 29)
    assert s.next_after(utc(2096, 3, 1), UTC_ZONE) == utc(2104, 2, 29)  # 2100 is no leap year
    assert time.perf_counter() - started < 0.5  # sanity guard; takes well under a millisecond


def test_schedule_that_never_fires_within_the_window_raises() -> None:
    # Vixie AND rule: Feb 29 that is also a Sunday. 2032 has one; after it, the next is 2060.
    s = CronSchedule.parse("0 0 29 2 */7")
    assert s.next_after(utc(2025, 1, 1), UTC_ZONE) == utc(2032, 2, 29)
    with pytest.raises(InvalidInput) as info:
        s.next_after(utc(2033, 1, 1), UTC_ZONE)
    assert info.value.code == "invalid_cron"


def test_impossible_schedule_built_directly_raises_in_next_after() -> None:
    s = CronSchedule((0,), (0,), (31,), (2,), tuple(range(7)), dom_star=False, dow_star=True)
    with pytest.raises(InvalidInput):
        s.next_after(utc(2024, 1, 1), UTC_ZONE)


def test_result_is_utc_and_naive_input_is_refused() -> None:
    s = CronSchedule.parse("0 12 * * *")
    assert s.next_after(datetime(2024, 6, 1, 8, tzinfo=BERLIN), BERLIN).tzinfo is UTC
    with pytest.raises(ValueError):
        s.next_after(datetime(2024, 6, 1), BERLIN)


# --- DST -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "day_before", "after_gap"),
    [
        # New York springs forward 2024-03-10 02:00 EST -> 03:00 EDT.
        (NEW_YORK, utc(2024, 3, 9, 12), utc(2024, 3, 11, 6, 30)),
        # Berlin springs forward 2024-03-31 02:00 CET -> 03:00 CEST.
        (BERLIN, utc(2024, 3, 30, 12), utc(2024, 4, 1, 0, 30)),
    ],
)
def test_gap_time_is_skipped(tz: ZoneInfo, day_before: datetime, after_gap: datetime) -> None:
    # 02:30 does not exist on the transition day: that day has no run at all.
    assert CronSchedule.parse("30 2 * * *").next_after(day_before, tz) == after_gap


@pytest.mark.parametrize(
    ("tz", "in_gap_hour_start", "first_real"),
    [
        (NEW_YORK, utc(2024, 3, 10, 6, 59), utc(2024, 3, 10, 7, 0)),  # 01:59 EST -> 03:00 EDT
        (BERLIN, utc(2024, 3, 31, 0, 59), utc(2024, 3, 31, 1, 0)),  # 01:59 CET -> 03:00 CEST
    ],
)
def test_every_minute_jumps_over_the_gap(
    tz: ZoneInfo, in_gap_hour_start: datetime, first_real: datetime
) -> None:
    s = CronSchedule.parse("* * * * *")
    nxt = s.next_after(in_gap_hour_start, tz)
    assert nxt == first_real
    assert nxt.astimezone(tz).hour == 3
    # Hourly jobs at minute 0 likewise go from 01:00 to 03:00.
    hourly = CronSchedule.parse("0 * * * *")
    assert hourly.next_after(in_gap_hour_start, tz) == first_real


@pytest.mark.parametrize(
    ("tz", "day_before", "first", "next_day"),
    [
        # New York falls back 2024-11-03 02:00 EDT -> 01:00 EST: 01:30 happens twice.
        (NEW_YORK, utc(2024, 11, 2, 12), utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)),
        # Berlin falls back 2024-10-27 03:00 CEST -> 02:00 CET: 02:30 happens twice.
        (BERLIN, utc(2024, 10, 26, 12), utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)),
    ],
)
def test_repeated_time_fires_once_at_first_occurrence(
    tz: ZoneInfo, day_before: datetime, first: datetime, next_day: datetime
) -> None:
    expr = "30 1 * * *" if tz is NEW_YORK else "30 2 * * *"
    s = CronSchedule.parse(expr)
    fired = s.next_after(day_before, tz)
    assert fired == first
    assert fired.astimezone(tz).fold == 0
    # The repeat, one hour later, is not a fire time.
    assert s.next_after(fired, tz) == next_day
    # Nor when asking from inside the repeated hour, before the repeat's 01:30/02:30.
    inside_repeat = first + timedelta(minutes=45)
    assert inside_repeat.astimezone(tz).fold == 1
    assert s.next_after(inside_repeat, tz) == next_day


def test_every_minute_is_silent_during_the_repeated_hour() -> None:
    s = CronSchedule.parse("* * * * *")
    # 01:59 EDT (05:59 UTC); the next minute, 01:00 EST, is a repeat: next fire is 02:00 EST.
    assert s.next_after(utc(2024, 11, 3, 5, 59), NEW_YORK) == utc(2024, 11, 3, 7, 0)
    # Berlin: 02:59 CEST (00:59 UTC) -> 03:00 CET (02:00 UTC).
    assert s.next_after(utc(2024, 10, 27, 0, 59), BERLIN) == utc(2024, 10, 27, 2, 0)
    # Asking from inside the repeated hour also resumes at the end of it.
    assert s.next_after(utc(2024, 11, 3, 6, 10), NEW_YORK) == utc(2024, 11, 3, 7, 0)

"""Standard 5-field cron expressions and their next fire time in a timezone.

Syntax (``minute hour day-of-month month day-of-week``), per field: ``*``, numbers, ranges
``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b,c``; month names ``JAN``-``DEC`` and weekday
names ``SUN``-``SAT`` (case-insensitive, also inside ranges); day-of-week 0-7 where both 0 and 7
are Sunday. The macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/
``@midnight`` and ``@hourly`` are accepted as their usual 5-field equivalents; ``@reboot`` is not
(it is not a time).

Day matching follows Vixie cron: if both day-of-month and day-of-week are restricted (neither
field starts with ``*``), a day matches when EITHER matches; otherwise both must match. As in
Vixie cron, a field like ``*/2`` starts with ``*`` and so counts as unrestricted for this rule.

Anything else raises :class:`~iris_runtime.errors.InvalidInput` with code ``invalid_cron`` and a
message naming the offending field.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from iris_runtime.errors import InvalidInput

ERROR_CODE = "invalid_cron"

# How far ahead next_after looks before declaring that a schedule never fires. Eight years covers
# two leap days whatever the start, so ``0 0 29 2 *`` is always found.
SEARCH_YEARS = 8

_MONTH_NAMES = {
    name: i + 1
    for i, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_WEEKDAY_NAMES = {
    name: i for i, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Longest possible length of each month (February counts its leap day), for the parse-time check
# that a day-of-month/month combination can ever happen.
_MAX_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# ASCII digits only: str.isdigit() would also accept things like "²".
_NUMBER = re.compile(r"[0-9]{1,4}")
_NAME = re.compile(r"[A-Za-z]{3}")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTH_NAMES),
    # 7 is accepted as a second Sunday and folded to 0 after parsing.
    _Field("day-of-week", 0, 7, _WEEKDAY_NAMES),
)


def _invalid(expr: str, field: str, why: str) -> InvalidInput:
    return InvalidInput(f"invalid cron expression {expr[:100]!r}: {field}: {why}", code=ERROR_CODE)


def _value(text: str, spec: _Field, expr: str) -> int:
    if _NUMBER.fullmatch(text):
        number = int(text)
    elif spec.names is not None and _NAME.fullmatch(text) and text.upper() in spec.names:
        number = spec.names[text.upper()]
    else:
        raise _invalid(expr, spec.name, f"{text!r} is not a valid value")
    if not spec.low <= number <= spec.high:
        raise _invalid(expr, spec.name, f"{number} is out of range {spec.low}-{spec.high}")
    return number


def _parse_field(text: str, spec: _Field, expr: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _invalid(expr, spec.name, "empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text):
                raise _invalid(expr, spec.name, f"step {step_text!r} is not a number")
            step = int(step_text)
            if step == 0:
                raise _invalid(expr, spec.name, "step must be at least 1")
        if base == "*":
            # For day-of-week, "*" means 0-6: 7 is only an alias and would double-count Sunday.
            low, high = spec.low, (6 if spec.name == "day-of-week" else spec.high)
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _value(first, spec, expr), _value(last, spec, expr)
            if low > high:
                raise _invalid(expr, spec.name, f"range {base!r} is reversed")
        else:
            if slash:
                # "5/15" means different things in different crons; refuse rather than guess.
                raise _invalid(expr, spec.name, f"step needs '*' or a range, not {base!r}")
            low = high = _value(base, spec, expr)
        values.update(range(low, high + 1, step))
    if spec.name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return tuple(sorted(values))


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression: the allowed values of each field, sorted ascending.

    ``weekdays`` uses cron numbering (0 = Sunday ... 6 = Saturday). ``dom_star``/``dow_star``
    record whether the day fields started with ``*``, which decides the Vixie OR rule.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    dom_star: bool
    dow_star: bool
    expr: str = ""

    @classmethod
    def parse(cls, expr: str) -> CronSchedule:
        """Parse a 5-field cron expression (or a supported ``@`` macro)."""
        text = expr.strip()
        if text.startswith("@"):
            if text.lower() not in _MACROS:
                raise _invalid(expr, "macro", f"unsupported macro {text[:20]!r}")
            text = _MACROS[text.lower()]
        parts = text.split()
        if len(parts) != 5:
            raise _invalid(
                expr,
                "expression",
                f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}",
            )
        minutes, hours, days, months, weekdays = (
            _parse_field(part, spec, expr) for part, spec in zip(parts, _FIELDS, strict=True)
        )
        schedule = cls(
            minutes=minutes,
            hours=hours,
            days=days,
            months=months,
            weekdays=weekdays,
            dom_star=parts[2].startswith("*"),
            dow_star=parts[4].startswith("*"),
            expr=expr.strip(),
        )
        # Catch "0 0 31 2 *" at load time instead of at the first next_after. Only the day-of-
        # month alone can make a schedule impossible: under the OR rule the weekday still fires,
        # and a "*"-day-of-month always includes the 1st.
        uses_or_rule = not schedule.dom_star and not schedule.dow_star
        if not uses_or_rule and not any(days[0] <= _MAX_MONTH_DAYS[month - 1] for month in months):
            raise _invalid(expr, "day-of-month", "no listed month has any of these days")
        return schedule

    def _day_matches(self, day: datetime) -> bool:
        dom_ok = day.day in self.days
        # datetime.weekday() is Monday=0; cron counts from Sunday=0.
        dow_ok = (day.weekday() + 1) % 7 in self.weekdays
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def _next_wall_time(self, start: datetime, limit_year: int) -> datetime | None:
        """The first matching naive wall-clock minute at or after naive ``start``.

        Jumps a whole month, day or hour whenever that unit cannot match, so even a leap-day
        schedule costs at most a few hundred steps over the whole search window.
        """
        t = start
        while t.year <= limit_year:
            if t.month not in self.months:
                later = bisect.bisect_right(self.months, t.month)
                if later < len(self.months):
                    t = datetime(t.year, self.months[later], 1)
                else:
                    t = datetime(t.year + 1, self.months[0], 1)
                continue
            if not self._day_matches(t):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                later = bisect.bisect_right(self.hours, t.hour)
                if later < len(self.hours):
                    t = t.replace(hour=self.hours[later], minute=0)
                else:
                    t = datetime(t.year, t.month, t.day) + timedelta(days=1)
                continue
            at = bisect.bisect_left(self.minutes, t.minute)
            if at < len(self.minutes):
                return t.replace(minute=self.minutes[at])
            t = t.replace(minute=0) + timedelta(hours=1)
        return None

    def next_after(self, after: datetime, tz: ZoneInfo) -> datetime:
        """The first fire time strictly after ``after``, as an aware UTC datetime.

        Matching is done on wall-clock minutes in ``tz``. Daylight-saving rules:

        * A wall time that does not exist (the spring-forward gap, e.g. 02:30 on the night New York
          or Berlin moves its clocks from 02:00 to 03:00) is skipped: the schedule does not fire
          for it at all and the next matching wall time is used instead (what systemd timers do).
        * A wall time that happens twice (fall-back) fires once, at its first occurrence
          (``fold=0``, still on summer time). Its repeat is never a fire time, even for ``*``
          fields, so ``* * * * *`` is silent during the repeated hour.

        Raises :class:`InvalidInput` (``invalid_cron``) if nothing matches within about
        ``SEARCH_YEARS`` years, and :class:`ValueError` if ``after`` is naive.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError("next_after needs an aware datetime")
        local = after.astimezone(tz)
        # Candidates are naive wall times; the first one after `after` is the next whole minute.
        start = local.replace(second=0, microsecond=0, tzinfo=None, fold=0) + timedelta(minutes=1)
        limit_year = min(start.year + SEARCH_YEARS, 9998)
        candidate = self._next_wall_time(start, limit_year)
        while candidate is not None:
            resolved = candidate.replace(tzinfo=tz, fold=0)
            as_utc = resolved.astimezone(UTC)
            # A gap time does not survive the round trip (02:30 comes back as 03:30).
            exists = as_utc.astimezone(tz).replace(tzinfo=None) == candidate
            # After a fall-back, a wall time can lie ahead of `after` while its first occurrence
            # is already past: that occurrence was its one fire, so move on.
            if exists and as_utc > after:
                return as_utc
            candidate = self._next_wall_time(candidate + timedelta(minutes=1), limit_year)
        raise InvalidInput(
            f"cron expression {self.expr[:100]!r} never fires within {SEARCH_YEARS} years",
            code=ERROR_CODE,
        )

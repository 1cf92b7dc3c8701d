"""Schemathesis hooks for the contract test (loaded by ``st run`` through ``SCHEMATHESIS_HOOKS``).

They teach the generator the rules docs/openapi.yaml states in words because JSON Schema cannot
state them: these are the string formats it names (valid cron expressions, time zones this
machine knows, instants that exist in UTC), and the fact that an attachment handle is a reference
to a file staged earlier, which no generated string can be.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import available_timezones

import schemathesis
from hypothesis import strategies as st

# Day-of-month stops at 28, a day every month has: "0 0 31 2 *" is refused on purpose.
_CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("dom", 1, 28), ("month", 1, 12), ("dow", 0, 7))
_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# The server checks a zone against this machine's time zone database, and so does this list.
_ZONES = tuple(
    sorted(
        {"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Sydney"}
        & available_timezones()
    )
)


def _cron_item(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    span = st.tuples(number, number).map(sorted)
    step = st.integers(1, high - low + 1)
    return st.one_of(
        st.just("*"),
        number.map(str),
        span.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        step.map(lambda n: f"*/{n}"),
        st.tuples(span, step).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
    )


def _cron_field(low: int, high: int) -> st.SearchStrategy[str]:
    return st.lists(_cron_item(low, high), min_size=1, max_size=3).map(",".join)


_CRON = st.one_of(
    st.tuples(*(_cron_field(low, high) for _, low, high in _CRON_FIELDS)).map(" ".join),
    st.sampled_from(_MACROS),
)


def _rfc3339(moment: datetime) -> str:
    text = moment.isoformat()
    return text.replace("+00:00", "Z") if moment.utcoffset() == timedelta(0) else text


# RFC 3339 instants whose UTC equivalent a datetime can hold: the server refuses the few near
# year 1 or 9999 that an offset pushes out of range.
_INSTANT = st.builds(
    lambda day, seconds, minutes: _rfc3339(
        datetime.combine(day, datetime.min.time(), timezone(timedelta(minutes=minutes)))
        + timedelta(seconds=seconds)
    ),
    st.dates(date(2, 1, 1), date(9998, 12, 31)),
    st.integers(0, 86_399),
    st.integers(-23 * 60 - 59, 23 * 60 + 59),
)

schemathesis.openapi.format("cron", _CRON)
schemathesis.openapi.format("time-zone", st.sampled_from(_ZONES))
schemathesis.openapi.format("date-time", _INSTANT)


@schemathesis.hook("filter_case").apply_to(operation_id="sendMessage")
def _no_invented_handles(context: schemathesis.HookContext, case: schemathesis.Case[Any]) -> bool:
    """A valid message carries only handles the attachments route returned, which no generator
    can invent: positive cases are sent without them (negative ones keep their bad handles).
    The stateful phase follows the document's link from an upload to a message, so real
    handles are still sent."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    body = case.body
    invented = isinstance(body, dict) and bool(body.get("attachments"))
    return not (positive and invented)

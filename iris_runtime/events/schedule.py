"""A deterministic timetable of one-shot and periodic entries, driven by an injected clock.

The timetable only answers "what is due now?" and "when should I wake up next?"; a runner loop
(wired in elsewhere) sleeps until :meth:`Timetable.next_wakeup` and then calls
:meth:`Timetable.due`. Keeping time behind the :class:`Clock` protocol makes every behaviour
testable with :class:`ManualClock`, without sleeps.

Entries live in a heap keyed by their next time. Removing or replacing an entry does not touch the
heap (lazy deletion): stale heap items are recognised and dropped when they surface, and the heap
is rebuilt if they ever outnumber the live ones, so ``due()`` costs O(k log n) for k due entries.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol
from zoneinfo import ZoneInfo

from iris_runtime.errors import InvalidInput
from iris_runtime.events.cron import CronSchedule

# The same spelling as the event types (an immediate event is a one-shot due at once).
DueKind = Literal["one-shot", "periodic"]
DEFAULT_GRACE = timedelta(seconds=60)
# Below this many stale heap items, compaction is not worth a rebuild.
_COMPACT_MIN = 1024


def _aware_utc(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime")
    return value.astimezone(UTC)


class Clock(Protocol):
    """Source of the current time."""

    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to, for tests and simulations."""

    def __init__(self, start: datetime) -> None:
        self._now = _aware_utc(start, "start")

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, dt: datetime) -> None:
        self._now = _aware_utc(dt, "dt")


@dataclass(frozen=True)
class Due:
    """One firing reported by :meth:`Timetable.due`.

    ``scheduled`` is the time the firing is for (UTC). ``late`` is set for a one-shot whose time
    had already passed by more than the grace period when it was added (it fires once, straight
    away), and for a periodic firing that is reported more than the grace period after its time
    (the runner was down or stalled; older missed times are dropped, not replayed).
    """

    id: str
    kind: DueKind
    scheduled: datetime
    late: bool


@dataclass(eq=False)
class _Entry:
    id: str
    kind: DueKind
    next_time: datetime
    # The sequence number of this entry's single live heap item; any other item is stale.
    seq: int
    late: bool = False
    schedule: CronSchedule | None = None
    tz: ZoneInfo | None = None


class Timetable:
    """Scheduled entries keyed by id, answering which are due and when to wake up next."""

    def __init__(self, clock: Clock, *, grace: timedelta = DEFAULT_GRACE) -> None:
        self._clock = clock
        self._grace = grace
        self._entries: dict[str, _Entry] = {}
        # (time, seq, entry): seq is unique, so the entry itself is never compared.
        self._heap: list[tuple[datetime, int, _Entry]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def next_time(self, entry_id: str) -> datetime | None:
        """When the entry fires next (UTC), or None if there is no such entry."""
        entry = self._entries.get(entry_id)
        return entry.next_time if entry is not None else None

    def add_one_shot(self, entry_id: str, at: datetime) -> None:
        """Fire once at ``at``. An existing entry with the same id is replaced.

        A time already past by more than the grace period is not dropped: it fires at the next
        ``due()`` and is marked late (an event whose moment passed while Iris was down).
        """
        at_utc = _aware_utc(at, "at")
        late = at_utc < self._clock.now() - self._grace
        self._push(_Entry(entry_id, "one-shot", at_utc, seq=-1, late=late))

    def add_periodic(self, entry_id: str, schedule: CronSchedule, tz: ZoneInfo) -> None:
        """Fire at each time of ``schedule`` in ``tz`` from now on. Replaces an existing entry.

        Raises InvalidInput if the schedule never fires within the search window.
        """
        first = schedule.next_after(self._clock.now(), tz)
        self._push(_Entry(entry_id, "periodic", first, seq=-1, schedule=schedule, tz=tz))

    def remove(self, entry_id: str) -> bool:
        """Cancel an entry; True if it existed. Its heap item goes stale and is dropped later."""
        removed = self._entries.pop(entry_id, None) is not None
        if removed:
            self._maybe_compact()
        return removed

    def next_wakeup(self) -> datetime | None:
        """The earliest pending time (UTC), or None when nothing is scheduled."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def due(self, now: datetime | None = None) -> list[Due]:
        """Entries due at or before ``now`` (default: the clock's now), ordered by time.

        One-shots are reported once and forgotten. A periodic entry is reported once, for its
        latest time at or before ``now`` (missed earlier times are not replayed), and moved to its
        first time after ``now``.
        """
        now_utc = _aware_utc(now, "now") if now is not None else self._clock.now()
        fired: list[Due] = []
        while self._heap and self._heap[0][0] <= now_utc:
            _, seq, entry = heapq.heappop(self._heap)
            if not self._is_live(seq, entry):
                continue
            if entry.kind == "one-shot":
                del self._entries[entry.id]
                fired.append(Due(entry.id, "one-shot", entry.next_time, entry.late))
                continue
            assert entry.schedule is not None and entry.tz is not None
            try:
                latest, following = _latest_and_next(
                    entry.schedule, entry.tz, entry.next_time, now_utc
                )
            except InvalidInput:
                # Only a schedule whose next match lies beyond the search window gets here
                # (e.g. Feb 29 on one weekday); it fires now and is then retired.
                latest, following = entry.next_time, None
            late = latest < now_utc - self._grace
            fired.append(Due(entry.id, "periodic", latest, late))
            if following is None:
                del self._entries[entry.id]
            else:
                entry.next_time = following
                self._push(entry)
        # Pop order is by each entry's first due time; report by the time actually fired for.
        fired.sort(key=lambda d: d.scheduled)
        return fired

    def _push(self, entry: _Entry) -> None:
        entry.seq = next(self._seq)
        self._entries[entry.id] = entry
        heapq.heappush(self._heap, (entry.next_time, entry.seq, entry))
        self._maybe_compact()

    def _is_live(self, seq: int, entry: _Entry) -> bool:
        return self._entries.get(entry.id) is entry and entry.seq == seq

    def _drop_stale_top(self) -> None:
        while self._heap and not self._is_live(self._heap[0][1], self._heap[0][2]):
            heapq.heappop(self._heap)

    def _maybe_compact(self) -> None:
        # Edits leave stale items behind; without this, a long-lived timetable whose entries are
        # edited often would grow its heap without bound.
        stale = len(self._heap) - len(self._entries)
        if stale > _COMPACT_MIN and stale > len(self._entries):
            self._heap = [(e.next_time, e.seq, e) for e in self._entries.values()]
            heapq.heapify(self._heap)


def _latest_and_next(
    schedule: CronSchedule, tz: ZoneInfo, first: datetime, now: datetime
) -> tuple[datetime, datetime]:
    """The latest fire time in [first, now] and the first one after ``now``.

    ``first`` is a fire time at or before ``now``. Walking forward from it one time at a time would
    cost one step per missed run (a week of downtime on ``* * * * *`` is 10,080 steps per entry),
    so instead look back from ``now`` over a doubling window until it holds a fire time, then walk
    only inside that window: O(log downtime) steps for evenly spread schedules.
    """
    latest = first
    window = timedelta(minutes=1)
    while now - window > latest:
        candidate = schedule.next_after(now - window, tz)
        if candidate <= now:
            latest = candidate
            break
        window *= 2
    while True:
        following = schedule.next_after(latest, tz)
        if following > now:
            return latest, following
        latest = following

"""The event service: event files become runs on their channels, and none is lost on the way.

The watcher (:mod:`.watcher`) reports files; this service schedules them on a
:class:`~iris_runtime.events.schedule.Timetable` and a firing thread delivers what is due to the
transport that owns the channel (``enqueue_event``, like any channel-addressed event). The rules
that make delivery lose nothing:

* a firing is written to ``state.db`` as *pending* before the queue is asked, *accepted* once it
  took the run, and *done* once the file is removed; immediate and one-shot files are removed
  only after acceptance (see :mod:`.state`);
* a refusal (the channel's queue is full) is not a drop: the firing waits in that channel's line
  and the head of the line is retried with backoff (0.25 s doubling to 5 s), in order, so a
  full channel costs a few attempts per second however many events wait for it;
* on start-up, unsettled firings of the previous process are checked against the channel's log:
  a run that was seen is never run again (a crash between acceptance and removal just gets its
  file removed); one that was accepted but never started (lost with the in-memory queue by a
  crash or a shutdown) is delivered again from the prompt kept in ``state.db``.

Periodic events follow cron in their own timezone. Instants missed while Iris was down, or while
the previous instant still waits for a full queue, are not replayed (the next one comes soon); a
one-shot whose time passed while Iris was down fires once at start-up, marked late.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris_runtime.engine.transport import TransportEvent, TransportRegistry
from iris_runtime.errors import EngineStopping, InvalidInput, NotFound
from iris_runtime.events.consume import consume, recover_consuming
from iris_runtime.events.files import (
    ROOT_FOLDER,
    EventSpec,
    Folder,
    digest,
    folder_problem,
    folders_for,
    read_bounded,
)
from iris_runtime.events.schedule import Clock, Due, SystemClock, Timetable
from iris_runtime.events.state import DB_NAME, Firing, FiringStore
from iris_runtime.events.watcher import Watcher, WatcherThread

if TYPE_CHECKING:
    from iris_runtime.engine.core import Engine

log = logging.getLogger(__name__)

EVENT_USER = "event"
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 5.0
# The firing thread re-reads the clock at least this often, so a wall-clock jump (suspend,
# NTP step) delays nothing by more than this; a far-away one-shot never rides one long timer.
MAX_SLEEP_SECONDS = 1.0
PRUNE_EVERY = timedelta(hours=1)
KEEP_DONE_SECONDS = 7 * 24 * 3600.0
# A run that never shows up in its channel's log is delivered again at most this many times.
MAX_DELIVERIES = 3
# Above this many firings in one pass, one summary line is logged instead of one per firing.
LOG_EACH_UP_TO = 20

ChannelLog = Callable[[str], list[dict[str, Any]]]


def event_prompt(rel: str, spec: EventSpec, when: str, fired_late_at: datetime | None) -> str:
    """``[EVENT:<file>:<type>:<when>] <text>``: tells the model nobody is waiting for a reply."""
    late = ""
    if fired_late_at is not None:
        late = f"(late: due {when}, fired {fired_late_at.isoformat(timespec='seconds')}) "
    return f"[EVENT:{rel}:{spec.type}:{when}] {late}{spec.text}"


def _utc_key(instant: datetime) -> str:
    # Fixed width, so keys of one event sort by time (state.finish_periodic relies on it).
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Active:
    """An event file the service has scheduled."""

    rel: str
    folder: Folder
    spec: EventSpec
    digest: str
    picked_up: datetime
    consumed: bool = False  # accepted; its file is being (or could not be) removed


@dataclass
class _Line:
    """Firings a channel's queue refused, retried in order."""

    items: deque[Firing]
    next_try: datetime
    backoff: float = RETRY_FIRST_SECONDS
    refusals: int = 1


class EventService:
    """Schedules event files and delivers their runs. See the module docstring for the rules.

    :meth:`open`, :meth:`scan_once` and :meth:`tick` run one step synchronously (tests drive a
    :class:`~iris_runtime.events.schedule.ManualClock` through them); :meth:`start` runs the
    watcher and firing threads.
    """

    def __init__(
        self,
        data_dir: Path,
        transports: TransportRegistry,
        *,
        clock: Clock | None = None,
        poll_seconds: float = 0.5,
        grace_seconds: float = 1.0,
        channel_log: ChannelLog | None = None,
        remove_file: Callable[[Path], None] = os.remove,
    ) -> None:
        self.data_dir = data_dir
        self._transports = transports
        self._clock = clock or SystemClock()
        self._poll = poll_seconds
        self._grace = timedelta(seconds=grace_seconds)
        self._channel_log = channel_log
        self._remove_file = remove_file
        self._store = FiringStore(data_dir / DB_NAME)
        self._timetable = Timetable(self._clock)
        self._active: dict[str, _Active] = {}
        self._lines: dict[str, _Line] = {}
        self._queued: Counter[str] = Counter()  # firings waiting in lines, per event file
        self._revived: list[Firing] = []
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._watcher: Watcher | None = None
        self._threads: tuple[threading.Thread, WatcherThread] | None = None
        self._next_prune: datetime | None = None

    @classmethod
    def for_engine(cls, engine: Engine) -> EventService:
        settings = engine.settings
        return cls(
            settings.data_dir,
            engine.transports,
            poll_seconds=settings.events_poll_seconds,
            grace_seconds=settings.events_parse_grace_seconds,
            channel_log=engine.sessions.entries,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def folders(self) -> list[Folder]:
        ids = [t.transport_id for t in self._transports.claiming()]
        return folders_for(ids)

    def open(self) -> None:
        """Open ``state.db``, settle what the previous process left, prepare the watcher."""
        with self._lock:
            if self._watcher is not None:
                return
            root = self.data_dir / ROOT_FOLDER
            if not os.path.lexists(root):  # a symlink there is refused by the watcher, not used
                root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._store.open()
            self._recover()
            self._watcher = Watcher(
                self.data_dir, self.folders, self, self._clock, grace=self._grace
            )

    def start(self) -> None:
        self.open()
        assert self._watcher is not None
        firing = threading.Thread(target=self._run, name="iris-events", daemon=True)
        watching = WatcherThread(self._watcher, self._poll, on_ready=self._on_ready)
        self._threads = (firing, watching)
        firing.start()
        watching.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads. Waiting firings stay pending in ``state.db`` and their files stay
        in place, so the next start delivers them."""
        self._stopping.set()
        self._wake.set()
        if self._threads is not None:
            firing, watching = self._threads
            watching.stop(timeout)
            firing.join(timeout)
        with self._lock:
            self._store.close()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Whether the first full scan has finished (everything on disk is scheduled)."""
        return self._ready.wait(timeout)

    def wake(self) -> None:
        """Run a firing pass now (something was scheduled or a line may move)."""
        self._wake.set()

    def scan_once(self) -> None:
        self.open()
        assert self._watcher is not None
        self._watcher.scan_once()

    def _on_ready(self) -> None:
        with self._lock:
            kinds = Counter(a.spec.type for a in self._active.values())
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none"
        watched = ", ".join(f"{f.rel}/" for f in self.folders)
        log.info("events: watching %s; scheduled: %s", watched, summary)
        self._ready.set()
        self.wake()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.tick()
            except Exception:
                log.exception("events: a firing pass failed; retrying")
            self._wake.wait(self._seconds_to_next())

    def _seconds_to_next(self) -> float:
        with self._lock:
            times = [line.next_try for line in self._lines.values()]
            wakeup = self._timetable.next_wakeup()
        if wakeup is not None:
            times.append(wakeup)
        if self._revived:
            return 0.0
        if not times:
            return MAX_SLEEP_SECONDS
        seconds = (min(times) - self._clock.now()).total_seconds()
        return min(max(seconds, 0.0), MAX_SLEEP_SECONDS)

    # -- what the watcher reports -----------------------------------------------------------------

    def route_problem(self, folder: Folder, spec: EventSpec) -> str | None:
        """Why ``spec`` cannot be delivered from ``folder``, or None when it can."""
        try:
            owner = self._transports.owner(spec.channel)
        except NotFound:
            return f"no transport owns channel {spec.channel!r}"
        if folder.transport is None or owner.transport_id == folder.transport:
            return None
        if not any(t.transport_id == folder.transport for t in self._transports.all()):
            return (
                f"the {folder.transport} transport is not loaded, so events in {folder.rel}/ "
                "cannot be delivered (is it configured?)"
            )
        return (
            f"channel {spec.channel!r} belongs to the {owner.transport_id} transport, not "
            f"{folder.transport}; put this file in {ROOT_FOLDER}/ instead"
        )

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> str | None:
        reason = self.route_problem(folder, spec)
        with self._lock:
            current = self._active.get(rel)
            unchanged = current is not None and current.digest == file_digest
            if reason is None and unchanged and current is not None and not current.consumed:
                return None  # touched, not changed
            self._cancel(rel)
            if reason is not None:
                return reason
            active = _Active(rel, folder, spec, file_digest, self._clock.now())
            try:
                self._schedule(active)
            except InvalidInput as exc:
                return f"'schedule': {exc.message}"
            except (OverflowError, ValueError) as exc:
                # The parser refuses what it can foresee; this keeps anything it cannot from
                # escaping into the watcher, where it would stop the scan of the whole folder.
                return f"cannot be scheduled: {exc}"
            self._active[rel] = active
            # During the first scan (maybe thousands of files) one summary line says it all.
            level = logging.INFO if self._ready.is_set() else logging.DEBUG
            if log.isEnabledFor(level):
                verb = "rescheduled" if current is not None else "scheduled"
                log.log(level, "events: %s %s (%s)", verb, rel, self._describe(active))
        self.wake()
        return None

    def on_gone(self, rel: str) -> None:
        with self._lock:
            active = self._active.get(rel)
            if self._cancel(rel) and active is not None and not active.consumed:
                log.info("events: cancelled %s (its file is gone or no longer valid)", rel)
        self.wake()

    def _schedule(self, active: _Active) -> None:
        spec = active.spec
        if spec.type == "periodic":
            assert spec.schedule is not None
            self._timetable.add_periodic(active.rel, spec.schedule, spec.zone)
        elif spec.type == "one-shot":
            assert spec.at is not None
            self._timetable.add_one_shot(active.rel, spec.at)
        else:
            self._timetable.add_one_shot(active.rel, active.picked_up)

    def _describe(self, active: _Active) -> str:
        upcoming = self._timetable.next_time(active.rel)
        when = upcoming.isoformat(timespec="seconds") if upcoming else "-"
        return f"{active.spec.type} on {active.spec.channel}, next {when}"

    def _cancel(self, rel: str) -> bool:
        """Forget the event's schedule and its firings still waiting for a queue."""
        active = self._active.pop(rel, None)
        self._timetable.remove(rel)
        if active is not None and rel in self._queued:
            dropped: list[Firing] = []
            for channel, line in list(self._lines.items()):
                mine = [f for f in line.items if f.event == rel and f.digest == active.digest]
                if mine:
                    dropped += mine
                    line.items = deque(f for f in line.items if f not in mine)
                    if not line.items:
                        del self._lines[channel]
            for firing in dropped:
                self._unqueued(firing)
            self._store.forget(f.ident for f in dropped)
        return active is not None

    def _unqueued(self, firing: Firing) -> None:
        left = self._queued[firing.event] - 1
        if left:
            self._queued[firing.event] = left
        else:
            del self._queued[firing.event]

    # -- firing -------------------------------------------------------------------------------

    def tick(self) -> None:
        """One firing pass: deliver what is due, retry waiting lines, prune old records."""
        now = self._clock.now()
        with self._lock:
            if self._watcher is None or self._stopping.is_set():
                return
            if self._revived:
                revived, self._revived = self._revived, []
                self._offer_all(revived)
            due = self._timetable.due(now)
            if due:
                self._deliver([f for d in due if (f := self._firing_for(d, now)) is not None])
            self._retry_lines(now)
            self._maybe_prune(now)

    def _firing_for(self, due: Due, now: datetime) -> Firing | None:
        active = self._active.get(due.id)
        if active is None or active.consumed:
            return None
        spec = active.spec
        if spec.type == "periodic":
            if due.id in self._queued:
                log.info(
                    "events: %s is still waiting for %s's queue; skipping its %s run",
                    due.id,
                    spec.channel,
                    due.scheduled.isoformat(timespec="seconds"),
                )
                return None
            key = _utc_key(due.scheduled)
            when = due.scheduled.astimezone(spec.zone).isoformat(timespec="seconds")
        elif spec.type == "one-shot":
            assert spec.at is not None
            key = f"{_utc_key(due.scheduled)}#{active.digest[:16]}"
            when = spec.at.isoformat()
        else:
            key = f"immediate#{active.digest[:16]}"
            when = active.picked_up.isoformat(timespec="seconds")
        prompt = event_prompt(due.id, spec, when, now if due.late else None)
        if due.late:
            log.warning("events: %s was due %s; firing it late", due.id, when)
        return Firing(due.id, key, spec.type, spec.channel, prompt, active.digest)

    def _deliver(self, firings: list[Firing]) -> None:
        stored = self._store.get_many(f.ident for f in firings)
        fresh: list[Firing] = []
        settled: list[Firing] = []
        for firing in firings:
            row = stored.get(firing.ident)
            if row is None or (row.state == "done" and row.kind != "periodic"):
                fresh.append(firing)  # new, or a new file with the content of a finished one
            elif row.state == "pending":
                # Left pending by a previous process that never saw it run (see _recover).
                fresh.append(row.with_state("pending"))
            elif row.state == "accepted":
                settled.append(row)
            else:
                log.info("events: %s already ran for %s; not again", firing.event, firing.key)
        self._offer_all(fresh)
        if settled:
            self._settle(settled)

    def _offer_all(self, firings: list[Firing]) -> None:
        if not firings:
            return
        self._store.put(f.with_state("pending") for f in firings)
        accepted: list[Firing] = []
        for firing in firings:
            line = self._lines.get(firing.channel)
            if line is not None:
                line.items.append(firing)
                self._queued[firing.event] += 1
            elif self._offer(firing):
                accepted.append(firing)
            else:
                self._start_line(firing)
        if accepted:
            self._settle(accepted)

    def _offer(self, firing: Firing) -> bool:
        """Hand the run to the channel's owner; False when it did not take it (for any reason)."""
        event = TransportEvent(channel=firing.channel, text=firing.prompt, user=EVENT_USER)
        try:
            return bool(self._transports.owner(firing.channel).enqueue_event(event))
        except EngineStopping:
            return False
        except Exception:
            log.exception("events: delivering %s to %s failed", firing.event, firing.channel)
            return False

    def _start_line(self, firing: Firing) -> None:
        now = self._clock.now()
        self._lines[firing.channel] = _Line(
            deque([firing]), now + timedelta(seconds=RETRY_FIRST_SECONDS)
        )
        self._queued[firing.event] += 1
        log.warning(
            "events: %s refused %s (its queue is full); it waits and is retried, nothing is "
            "dropped",
            firing.channel,
            firing.event,
        )

    def _retry_lines(self, now: datetime) -> None:
        for channel, line in list(self._lines.items()):
            if line.next_try > now:
                continue
            accepted: list[Firing] = []
            while line.items and self._offer(line.items[0]):
                accepted.append(line.items.popleft())
                self._unqueued(accepted[-1])
            if accepted:
                self._settle(accepted)
            if not line.items:
                del self._lines[channel]
                log.info(
                    "events: %s took its waiting events after %d refusal(s)",
                    channel,
                    line.refusals,
                )
                continue
            line.refusals += 1
            line.backoff = (
                RETRY_FIRST_SECONDS if accepted else min(line.backoff * 2, RETRY_MAX_SECONDS)
            )
            line.next_try = now + timedelta(seconds=line.backoff)

    def _settle(self, firings: list[Firing]) -> None:
        """Accepted: record it, remove the files that were consumed, then record that."""
        consumed = [f for f in firings if f.kind != "periodic"]
        periodic = [f for f in firings if f.kind == "periodic"]
        if consumed:
            self._store.set_state((f.ident for f in consumed), "accepted")
            done = [f for f in consumed if self._consume(f)]
            self._store.set_state((f.ident for f in done), "done")
        if periodic:
            self._store.finish_periodic(periodic)
        _log_fired(firings)

    def _consume(self, firing: Firing) -> bool:
        """Remove the file the firing came from; True once it is gone (or is a newer file)."""
        active = self._active.get(firing.event)
        if active is not None and active.digest == firing.digest:
            active.consumed = True
        return self._remove_fired(firing, "it ran")

    def _remove_fired(self, firing: Firing, why: str) -> bool:
        """Remove the version of the file that fired, never another; True unless that failed."""
        if folder_problem(self.data_dir, _folder_of(firing.event)) is not None:
            log.error(
                "events: %s ran, but its folder is not usable; it is left alone", firing.event
            )
            return False
        try:
            outcome = consume(self.data_dir / firing.event, firing.digest, unlink=self._remove_file)
        except OSError as exc:
            # It stays accepted: the next start removes the file without running it again.
            log.error("events: %s (%s) could not be removed: %s", firing.event, why, exc)
            return False
        if outcome == "newer":
            log.info("events: %s changed after it fired; the new version stays", firing.event)
        return True

    def _maybe_prune(self, now: datetime) -> None:
        if self._next_prune is not None and now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY
        removed = self._store.prune(time.time() - KEEP_DONE_SECONDS)
        if removed:
            log.info("events: forgot %d finished firing(s) older than a week", removed)

    # -- start-up -----------------------------------------------------------------------------

    def _recover(self) -> None:
        """Settle what the previous process left unsettled (see the module docstring)."""
        for folder in self.folders:
            if folder_problem(self.data_dir, folder) is None:
                for name, outcome in recover_consuming(self.data_dir / folder.rel):
                    log.info(
                        "events: settled %s/%s, left half-removed (%s)", folder.rel, name, outcome
                    )
        seen_runs: dict[str, set[str]] = {}
        for row in self._store.unsettled():
            if row.kind == "periodic":
                if row.state != "done":
                    log.info(
                        "events: %s's run for %s was still waiting at shutdown; periodic runs "
                        "are not replayed",
                        row.event,
                        row.key,
                    )
                    self._store.forget([row.ident])
                continue
            if self._ran(row, seen_runs):
                self._remove_leftover(row)
                self._store.set_state([row.ident], "done")
                self._store.mark_verified([row.ident])
            elif row.state == "pending":
                # The watcher picks the file up again and _deliver re-offers this row, unless
                # the file was deleted or replaced while Iris was down (then this firing is moot).
                if self._file_digest(row.event) != row.digest:
                    self._store.forget([row.ident])
            else:
                self._revive(row)

    def _ran(self, row: Firing, seen_runs: dict[str, set[str]]) -> bool:
        if self._channel_log is None:
            # Nothing to check against: trust the record (accepted means it ran).
            return row.state != "pending"
        if row.channel not in seen_runs:
            try:
                entries = self._channel_log(row.channel)
            except Exception:
                log.exception("events: cannot read %s's log", row.channel)
                entries = []
            seen_runs[row.channel] = {
                str(e.get("text"))
                for e in entries
                if e.get("role") == "user" and e.get("status") != "cancelled"
            }
        return row.prompt in seen_runs[row.channel]

    def _revive(self, row: Firing) -> None:
        self._remove_leftover(row)
        if row.attempts >= MAX_DELIVERIES:
            log.error(
                "events: %s was accepted %d times but never ran on %s; giving up on it",
                row.event,
                row.attempts,
                row.channel,
            )
            self._store.mark_verified([row.ident])
            return
        log.warning(
            "events: %s was accepted by %s but never ran (Iris stopped first); delivering again",
            row.event,
            row.channel,
        )
        self._revived.append(replace(row, attempts=row.attempts + 1))

    def _file_digest(self, rel: str) -> str | None:
        try:
            return digest(read_bounded(self.data_dir / rel))
        except OSError:
            return None

    def _remove_leftover(self, row: Firing) -> None:
        if self._file_digest(row.event) == row.digest and self._remove_fired(row, "already fired"):
            log.info("events: removed %s, which had already fired", row.event)

    # -- what the API shows -------------------------------------------------------------------

    def waiting(self) -> dict[str, str]:
        """Events whose run waits for a full queue: file → channel."""
        with self._lock:
            return {f.event: c for c, line in self._lines.items() for f in line.items}

    def next_time(self, rel: str) -> datetime | None:
        with self._lock:
            return self._timetable.next_time(rel)


def _folder_of(rel: str) -> Folder:
    return Folder(rel.rsplit("/", 1)[0])


def _log_fired(firings: Iterable[Firing]) -> None:
    fired = list(firings)
    if len(fired) > LOG_EACH_UP_TO:
        first, last = fired[0].event, fired[-1].event
        log.info("events: %d runs accepted (%s ... %s)", len(fired), first, last)
        return
    for firing in fired:
        log.info("events: %s fired on %s (%s)", firing.event, firing.channel, firing.kind)

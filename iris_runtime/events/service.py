"""The event service: event files become runs on their channels, and none is lost on the way.

The watcher (:mod:`.watcher`) reports files; this service schedules them on a
:class:`~iris_runtime.events.schedule.Timetable`, and a firing thread hands what is due to
:mod:`.delivery`, which offers each run to the transport that owns the channel and records every
step in ``state.db`` (see :mod:`.state`). On start-up, :mod:`.recovery` settles what the previous
process left half-way. A due instant becomes a firing in :mod:`.firings`; the file it came from is
removed or rejected by :mod:`.fired_files`. This module owns the schedule and the threads; the
rules that make delivery lose nothing live with the code that keeps them.

Locking: ``_lock`` guards the schedule (the timetable and the scheduled files) and is only held
for in-memory work. ``state.db`` and file removals happen on the firing thread outside it
(``_firing_lock`` keeps firing passes one at a time), so a slow or locked database delays firings
but never the watcher or the API.

Periodic events follow cron in their own timezone. Instants missed while Iris was down, or while
the previous instant still waits for a full queue, are not replayed (the next one comes soon); a
one-shot whose time passed while Iris was down fires once at start-up, marked late.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from iris_runtime.engine.transport import TransportRegistry
from iris_runtime.errors import InvalidInput, IrisError
from iris_runtime.events import routing
from iris_runtime.events.delivery import Delivery
from iris_runtime.events.files import (
    EventSpec,
    EventsUnavailable,
    Folder,
    folder_problem,
    folders_for,
)
from iris_runtime.events.fired_files import FiredFiles
from iris_runtime.events.firings import new_firing
from iris_runtime.events.recovery import ChannelLog, Recovery
from iris_runtime.events.schedule import Clock, Due, SystemClock, Timetable
from iris_runtime.events.state import DB_NAME, Firing, FiringStore
from iris_runtime.events.watcher import Watcher, WatcherThread
from iris_runtime.private_files import UnsafeFile

if TYPE_CHECKING:
    from iris_runtime.engine.core import Engine

log = logging.getLogger(__name__)

# The firing thread re-reads the clock at least this often, so a wall-clock jump (suspend,
# NTP step) delays nothing by more than this; a far-away one-shot never rides one long timer.
MAX_SLEEP_SECONDS = 1.0
PRUNE_EVERY = timedelta(hours=1)
KEEP_SECONDS = 7 * 24 * 3600.0


@dataclass
class _Active:
    """An event file the service has scheduled."""

    rel: str
    folder: Folder
    spec: EventSpec
    digest: str
    picked_up: datetime
    consumed: bool = False  # accepted; its file is being (or could not be) removed


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
        self._files = FiredFiles(data_dir, remove_file)
        self._store = FiringStore(data_dir / DB_NAME, now=lambda: self._clock.now().timestamp())
        self._timetable = Timetable(self._clock)
        self._active: dict[str, _Active] = {}
        self._delivery = Delivery(
            transports, self._store, self._clock, consume=self._consume, give_up=self._give_up
        )
        self._recovery = Recovery(data_dir, self._store, channel_log, remove=self._files.remove)
        # Due firings whose previous run could not be verified yet (see recovery).
        self._blocked: dict[tuple[str, str], Firing] = {}
        self._lock = threading.RLock()
        self._firing_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._watcher: Watcher | None = None
        self._threads: tuple[threading.Thread, WatcherThread] | None = None
        self._next_prune: datetime | None = None
        self._last_failure = ""
        # Why scheduled events are disabled in this process, or None.
        self.unavailable: str | None = None

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
        """Open ``state.db``, settle what the previous process left, prepare the watcher.

        Raises EventsUnavailable (and stays unavailable) when ``state.db`` cannot be used."""
        if self._watcher is not None:
            return  # already open (checked again under the locks)
        if self.unavailable is not None:
            raise EventsUnavailable(self.unavailable)
        with self._firing_lock, self._lock:
            if self._watcher is not None:
                return
            try:
                self._make_folders()
                self._store.open()
                revived = self._recovery.start(self.folders, self._clock.now())
            except (sqlite3.Error, OSError, UnsafeFile) as exc:
                # Without its record, delivery could neither promise "nothing lost" nor "nothing
                # twice": nothing runs and nothing is touched until the record is usable again.
                self._store.close()
                self.unavailable = (
                    f"{self._store.path} cannot be used ({type(exc).__name__}: {exc}); scheduled "
                    "events are disabled until it is repaired or moved aside (see docs/events.md)"
                )
                log.error("events: %s", self.unavailable)
                raise EventsUnavailable(self.unavailable) from exc
            self._delivery.hold(revived, check=False)
            self._watcher = Watcher(
                self.data_dir, self.folders, self, self._clock, grace=self._grace
            )

    def _make_folders(self) -> None:
        # events/, and <id>/events/ of each loaded transport: that folder existing is how
        # `iris events` (which runs no transport) knows the folder is watched.
        loaded = {t.transport_id for t in self._transports.claiming()}
        for folder in self.folders:
            path = self.data_dir / folder.rel
            # A symlink there is refused by the watcher, never followed nor replaced.
            if (folder.transport is None or folder.transport in loaded) and not (
                os.path.lexists(path) or folder_problem(self.data_dir, folder)
            ):
                path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def start(self) -> None:
        """Start watching and firing; with ``state.db`` unusable, Iris runs on without events."""
        try:
            self.open()
        except EventsUnavailable:
            return  # logged; the API answers 503 and `iris doctor` says why
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
        # A firing pass stuck on a locked database must not keep Iris from exiting.
        if self._firing_lock.acquire(timeout=timeout):
            try:
                self._store.close()
            finally:
                self._firing_lock.release()

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
                self._last_failure = ""
            except Exception as exc:
                # Once per kind of failure: a database locked for minutes is one log entry, not
                # one per retry. Nothing is lost meanwhile (see delivery).
                failure = f"{type(exc).__name__}: {exc}"
                if failure != self._last_failure:
                    log.exception("events: a firing pass failed; retrying")
                    self._last_failure = failure
            self._wake.wait(self._seconds_to_next())

    def _seconds_to_next(self) -> float:
        with self._lock:
            wakeup = self._timetable.next_wakeup()
        times = [t for t in (wakeup, self._delivery.next_try(), self._recovery.next_retry()) if t]
        if not times:
            return MAX_SLEEP_SECONDS
        seconds = (min(times) - self._clock.now()).total_seconds()
        return min(max(seconds, 0.0), MAX_SLEEP_SECONDS)

    # -- what the watcher reports -----------------------------------------------------------------

    def route_problem(self, folder: Folder, spec: EventSpec) -> str | None:
        """Why ``spec`` cannot be delivered from ``folder``, or None when it can."""
        error = self.route_error(folder, spec)
        return None if error is None else error.message

    def route_error(self, folder: Folder, spec: EventSpec) -> IrisError | None:
        """:meth:`route_problem` as the error the API answers: ``NoSuchChannel`` (404) or
        ``TransportNotRunning`` (409) for a channel of a transport's shape that no running
        transport serves, ``InvalidInput`` (400 ``unroutable_event``) for a wrong folder."""
        return routing.route_error(self._transports, folder, spec)

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
        """Forget the event's schedule and its firings not yet taken by a queue."""
        active = self._active.pop(rel, None)
        self._timetable.remove(rel)
        if active is not None:
            self._delivery.drop(rel, active.digest)
            for ident in [i for i, f in self._blocked.items() if f.event == rel]:
                del self._blocked[ident]
        return active is not None

    # -- firing -------------------------------------------------------------------------------

    def tick(self) -> None:
        """One firing pass: hand over what is due, retry waiting lines, prune old records."""
        with self._firing_lock:
            now = self._clock.now()
            with self._lock:
                if self._watcher is None or self._stopping.is_set():
                    return
                due = self._timetable.due(now)
                firings = [f for d in due if (f := self._firing_for(d, now)) is not None]
                # Held by delivery from here on: whatever fails later, these are not lost.
                self._delivery.hold(firings)
            self._reverify(now)
            self._delivery.run(now)
            self._maybe_prune(now)

    def _firing_for(self, due: Due, now: datetime) -> Firing | None:
        active = self._active.get(due.id)
        if active is None or active.consumed:
            return None
        spec = active.spec
        if spec.type == "periodic" and self._delivery.is_waiting(due.id):
            log.info(
                "events: %s is still waiting for %s's queue; skipping its %s run",
                due.id,
                spec.channel,
                due.scheduled.isoformat(timespec="seconds"),
            )
            return None
        firing, when = new_firing(due, spec, active.digest, active.picked_up, now)
        if self._delivery.has(firing.ident):
            return None  # already on its way (delivered again after a restart)
        if self._recovery.blocks(firing.ident):
            self._blocked[firing.ident] = firing
            return None
        if due.late:
            log.warning("events: %s was due %s; firing it late", due.id, when)
        return firing

    def _reverify(self, now: datetime) -> None:
        """Firings whose previous run could not be verified at start-up, tried again."""
        revived, pending = self._recovery.retry(now)
        self._delivery.hold(revived, check=False)
        with self._lock:
            released = [f for i, f in self._blocked.items() if not self._recovery.blocks(i)]
            for firing in released:
                del self._blocked[firing.ident]
            # A pending firing that did not run is offered as usual; any other was settled
            # (it ran, or it is being delivered again from its record).
            self._delivery.hold([f for f in released if f.ident in pending])

    def _consume(self, firing: Firing) -> bool:
        """Remove the file the firing came from; True once it is gone (or is a newer file).

        A firing delivered again at start-up may get here before the watcher has reported its
        file. The watcher may have read it already, and its report, arriving after the
        removal, would look like a new file with the same content and run it again. So the
        file is left, and the firing stays accepted, until the watcher reports it: it then
        comes back here as an accepted firing whose file is left to remove (see delivery)."""
        with self._lock:
            active = self._active.get(firing.event)
            reported = active is not None and active.digest == firing.digest
            if active is not None and reported:
                active.consumed = True
        if not reported and self._files.holds(firing):
            return False
        return self._files.remove(firing, "it ran")

    def _give_up(self, firing: Firing, reason: str) -> None:
        """Its channel kept failing: a periodic event skips this instant; a one-shot or
        immediate file is rejected, its reason written next to it (edit or touch it to retry)."""
        if firing.kind == "periodic":
            log.error("events: skipping %s's run for %s: %s", firing.event, firing.key, reason)
            return
        with self._lock:
            active = self._active.get(firing.event)
            if active is not None and active.digest == firing.digest:
                self._cancel(firing.event)
        self._files.reject(firing, reason)

    def _maybe_prune(self, now: datetime) -> None:
        if self._next_prune is not None and now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY
        keep = self._delivery.in_progress() | self._recovery.unverified()
        removed = self._store.prune(now.timestamp() - KEEP_SECONDS, keep=keep)
        if removed:
            log.info("events: forgot %d settled or moot firing(s) older than a week", removed)

    # -- what the API shows -------------------------------------------------------------------

    def waiting(self) -> dict[str, str]:
        """Events whose run is due but not yet taken by its channel: file → channel."""
        return self._delivery.waiting()

    def next_time(self, rel: str) -> datetime | None:
        with self._lock:
            return self._timetable.next_time(rel)

"""Delivery: due firings handed to their channels' queues, none lost on the way.

The firing thread runs :meth:`Delivery.run`. Its ``state.db`` and file work happens outside the
service's lock (and this module's own lock is held only to move firings between in-memory lists),
so a slow or locked database delays firings but never stalls the watcher or the API. The rules:

* a due firing is *held* until it is recorded as pending in ``state.db``; if that write fails
  (the database is locked, the disk is full) it stays held and the next pass tries again;
* recorded, it joins its channel's *line*, which is offered to the channel's owner
  (``enqueue_event``) head first, in order;
* a refusal (the queue is full) is not a failure: the head is offered again with backoff (0.25 s
  doubling to 5 s) until it is taken, and that is logged once per line;
* an error (the owner raised) is a failure: retried with a longer backoff (1 s doubling to 60 s),
  logged once per outage with its reason; after :data:`MAX_FAILURES` consecutive failures the
  firing is given up (the service writes the reason next to a one-shot or immediate file; a
  periodic event skips that instant) and the line moves on;
* Iris shutting down (``EngineStopping``) is neither: the line just waits, the firing stays
  pending in ``state.db``, and the next start delivers it;
* accepted firings are recorded (accepted, file removed, done) in one batch per pass; if that
  fails, the batch is retried before anything else.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from iris_runtime.engine.transport import TransportEvent, TransportRegistry
from iris_runtime.errors import EngineStopping
from iris_runtime.events.schedule import Clock
from iris_runtime.events.state import Firing, FiringStore
from iris_runtime.failpoints import failpoint

log = logging.getLogger(__name__)

EVENT_USER = "event"
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 5.0
ERROR_RETRY_FIRST_SECONDS = 1.0
ERROR_RETRY_MAX_SECONDS = 60.0
# A firing whose channel raised this many times in a row is given up (about two minutes).
MAX_FAILURES = 8
# How soon a pass that could not write to state.db is tried again.
STORE_RETRY_SECONDS = 1.0
# Above this many firings in one pass, one summary line is logged instead of one per firing.
LOG_EACH_UP_TO = 20

Ident = tuple[str, str]
OfferResult = Literal["accepted", "full", "stopping", "failed"]


@dataclass
class _Line:
    """A channel's firings, offered head first."""

    items: deque[Firing]
    next_try: datetime
    backoff: float = 0.0
    refusals: int = 0  # times the queue was full, for the log line when it finally takes them
    failures: int = 0  # consecutive errors offering the firing ``failing``
    failing: Ident | None = None
    outage: str | None = None  # the error being retried, logged once when it began
    stopping: bool = False  # Iris is shutting down; logged once


@dataclass
class _Held:
    firing: Firing
    check: bool  # look the firing up in state.db first (False: it comes from there already)


class Delivery:
    """See the module docstring. ``consume`` removes a fired one-shot or immediate file (True
    once it is gone); ``give_up`` is told about a firing its channel kept failing."""

    def __init__(
        self,
        transports: TransportRegistry,
        store: FiringStore,
        clock: Clock,
        *,
        consume: Callable[[Firing], bool],
        give_up: Callable[[Firing, str], None],
    ) -> None:
        self._transports = transports
        self._store = store
        self._clock = clock
        self._consume = consume
        self._give_up = give_up
        self._lock = threading.Lock()
        self._held: list[_Held] = []
        self._lines: dict[str, _Line] = {}
        self._unsettled: list[Firing] = []  # accepted, not yet recorded as such
        self._forget: list[Ident] = []  # pending rows of firings that were cancelled
        self._per_event: Counter[str] = Counter()  # held and queued firings per event file
        self._idents: set[Ident] = set()  # the same firings, by identity
        self._store_retry_at: datetime | None = None

    # -- what the service asks (any thread) -----------------------------------------------------

    def hold(self, firings: Iterable[Firing], *, check: bool = True) -> None:
        with self._lock:
            for firing in firings:
                self._held.append(_Held(firing, check))
                self._track(firing)

    def drop(self, event: str, file_digest: str) -> None:
        """Cancel the firings of this version of ``event`` that have not been taken yet."""
        with self._lock:
            if event not in self._per_event:
                return
            dropped = [h.firing for h in self._held if _is_of(h.firing, event, file_digest)]
            self._held = [h for h in self._held if not _is_of(h.firing, event, file_digest)]
            for channel, line in list(self._lines.items()):
                mine = [f for f in line.items if _is_of(f, event, file_digest)]
                if mine:
                    dropped += mine
                    line.items = deque(f for f in line.items if f not in mine)
                    if not line.items:
                        del self._lines[channel]
            for firing in dropped:
                self._untrack(firing)
                self._forget.append(firing.ident)

    def is_waiting(self, event: str) -> bool:
        """Whether a firing of ``event`` is due but not yet taken by its channel."""
        with self._lock:
            return event in self._per_event

    def has(self, ident: Ident) -> bool:
        with self._lock:
            return ident in self._idents

    def waiting(self) -> dict[str, str]:
        """Event file → channel, for firings due but not yet taken."""
        with self._lock:
            out = {h.firing.event: h.firing.channel for h in self._held}
            out.update((f.event, c) for c, line in self._lines.items() for f in line.items)
            return out

    def in_progress(self) -> set[Ident]:
        with self._lock:
            return set(self._idents)

    def next_try(self) -> datetime | None:
        """When :meth:`run` has something to do next (None: only when something is added)."""
        with self._lock:
            times = [line.next_try for line in self._lines.values()]
            if self._held or self._unsettled or self._forget:
                times.append(self._store_retry_at or self._clock.now())
        return min(times) if times else None

    # -- the firing thread -------------------------------------------------------------------

    def run(self, now: datetime) -> None:
        """One pass. Raises what ``state.db`` raised; nothing is lost then (see the docstring)."""
        try:
            self._forget_cancelled()
            self._record_held()
            self._settle(self._take_unsettled())
            self._settle(self._offer_lines(now))
        except Exception:
            self._store_retry_at = now + timedelta(seconds=STORE_RETRY_SECONDS)
            raise
        self._store_retry_at = None

    def _forget_cancelled(self) -> None:
        with self._lock:
            idents, self._forget = self._forget, []
        if not idents:
            return
        try:
            self._store.forget_pending(idents)
        except Exception:
            with self._lock:
                self._forget = idents + self._forget
            raise

    def _take_unsettled(self) -> list[Firing]:
        with self._lock:
            firings, self._unsettled = self._unsettled, []
        return firings

    def _record_held(self) -> None:
        """Record held firings as pending (the one write before a queue is asked), then line
        them up. Nothing leaves the held list unless that write succeeded."""
        with self._lock:
            held = list(self._held)
        if not held:
            return
        stored = self._store.get_many(h.firing.ident for h in held if h.check)
        fresh: dict[Ident, Firing] = {}
        again: list[Firing] = []  # accepted earlier; only their files are left to remove
        for item in held:
            row = stored.get(item.firing.ident) if item.check else None
            if row is None or (row.state == "done" and row.kind != "periodic"):
                fresh[item.firing.ident] = item.firing  # new, or a new file like a finished one
            elif row.state == "pending":
                fresh[row.ident] = row  # left pending before: offered with its recorded prompt
            elif row.state == "accepted":
                again.append(row)
            else:
                log.info("events: %s already ran for %s; not again", row.event, row.key)
        self._store.put(f.with_state("pending") for f in fresh.values())
        if fresh:
            failpoint("events.pending_recorded")  # recorded, not yet offered to a queue
        with self._lock:
            taken = {id(h) for h in held}
            kept = {id(h) for h in self._held} & taken  # not cancelled meanwhile
            self._held = [h for h in self._held if id(h) not in taken]
            now = self._clock.now()
            for item in held:
                firing = fresh.pop(item.firing.ident, None) if id(item) in kept else None
                if firing is None:
                    if id(item) in kept:
                        self._untrack(item.firing)  # ran already, or accepted earlier
                    continue
                line = self._lines.get(firing.channel)
                if line is None:
                    self._lines[firing.channel] = _Line(deque([firing]), now)
                else:
                    line.items.append(firing)
            self._unsettled.extend(again)

    def _offer_lines(self, now: datetime) -> list[Firing]:
        accepted: list[Firing] = []
        with self._lock:
            channels = [c for c, line in self._lines.items() if line.next_try <= now]
        for channel in channels:
            self._offer_line(channel, now, accepted)
        return accepted

    def _offer_line(self, channel: str, now: datetime, accepted: list[Firing]) -> None:
        while True:
            with self._lock:
                line = self._lines.get(channel)
                if line is None or not line.items:
                    return
                head = line.items[0]
            # Offered without the lock: a transport may take its time, and a cancellation
            # meanwhile must not wait for it.
            result, error = self._offer(head)
            given_up: str | None = None
            with self._lock:
                # Unless it was cancelled while being offered, the head is still at the front.
                current = bool(line.items) and line.items[0] is head
                if result == "accepted":
                    accepted.append(head)  # taken, so settled even if cancelled meanwhile
                    self._took(channel, line)
                else:
                    given_up = self._not_taken(channel, line, head, result, error, now)
                if current and (result == "accepted" or given_up is not None):
                    line.items.popleft()
                    self._untrack(head)
                if not line.items and self._lines.get(channel) is line:
                    del self._lines[channel]
                more = result == "accepted" and bool(line.items)
            if given_up is not None and current:
                self._forget_given_up(head)
                self._give_up(head, given_up)
            if not more:
                return

    def _took(self, channel: str, line: _Line) -> None:
        if line.outage is not None:
            log.info("events: %s takes events again", channel)
        elif line.refusals and len(line.items) <= 1:
            log.info(
                "events: %s took its waiting events after %d refusal(s)", channel, line.refusals
            )
        line.failures, line.outage, line.stopping, line.backoff = 0, None, False, 0.0

    def _not_taken(
        self,
        channel: str,
        line: _Line,
        head: Firing,
        result: OfferResult,
        error: BaseException | None,
        now: datetime,
    ) -> str | None:
        """Set the line's next try after a refusal, a failure or a shutdown. Returns the reason
        when ``head`` is to be given up (the caller takes it out of the line)."""
        if result == "full":
            if not line.refusals:
                log.warning(
                    "events: %s refused %s (its queue is full); it waits and is retried, "
                    "nothing is dropped",
                    channel,
                    head.event,
                )
            line.refusals += 1
            line.failures = 0
            line.backoff = _doubled(line.backoff, RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)
        elif result == "stopping":
            if not line.stopping:
                log.info(
                    "events: Iris is shutting down; %s stays pending and runs after the restart",
                    head.event,
                )
            line.stopping = True
            line.backoff = _doubled(line.backoff, RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)
        else:
            reason = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
            if line.failing != head.ident:  # counted per firing: a new head starts afresh
                line.failing, line.failures = head.ident, 0
            line.failures += 1
            if line.outage is None:
                log.error(
                    "events: delivering %s to %s failed: %s; retrying with backoff",
                    head.event,
                    channel,
                    reason,
                    exc_info=error,
                )
            line.outage = reason
            line.backoff = _doubled(
                line.backoff, ERROR_RETRY_FIRST_SECONDS, ERROR_RETRY_MAX_SECONDS
            )
            if line.failures >= MAX_FAILURES:
                line.failures = 0
                line.next_try = now + timedelta(seconds=line.backoff)
                return f"{channel} failed to take it {MAX_FAILURES} times in a row: {reason}"
        line.next_try = now + timedelta(seconds=line.backoff)
        return None

    def _offer(self, firing: Firing) -> tuple[OfferResult, BaseException | None]:
        """Hand the run to the channel's owner: taken, refused (its queue is full), Iris is
        stopping, or failed (with what was raised)."""
        event = TransportEvent(channel=firing.channel, text=firing.prompt, user=EVENT_USER)
        try:
            taken = self._transports.owner(firing.channel).enqueue_event(event)
        except EngineStopping:
            return "stopping", None
        except Exception as exc:  # NotFound too: no transport owns the channel any more
            return "failed", exc
        return ("accepted" if taken else "full"), None

    def _forget_given_up(self, firing: Firing) -> None:
        with self._lock:
            self._forget.append(firing.ident)

    def _settle(self, firings: list[Firing]) -> None:
        """Accepted: record it, remove the files that were consumed, then record that. On a
        failure the whole batch is kept and done again (each step may safely repeat)."""
        if not firings:
            return
        try:
            consumed = [f for f in firings if f.kind != "periodic"]
            periodic = [f for f in firings if f.kind == "periodic"]
            # The crash trials (tests/faults) kill Iris between each of these steps.
            failpoint("events.taken")  # in a channel's queue, nothing recorded yet
            if consumed:
                self._store.set_state((f.ident for f in consumed), "accepted")
                failpoint("events.accepted_recorded")
                done = [f for f in consumed if self._consume(f)]
                failpoint("events.file_removed")
                self._store.set_state((f.ident for f in done), "done")
                failpoint("events.done_recorded")  # its run may still be waiting or running
            if periodic:
                self._store.finish_periodic(periodic)
        except Exception:
            with self._lock:
                self._unsettled = firings + self._unsettled
            raise
        _log_fired(firings)

    # -- bookkeeping (under the lock) ------------------------------------------------------------

    def _track(self, firing: Firing) -> None:
        self._per_event[firing.event] += 1
        self._idents.add(firing.ident)

    def _untrack(self, firing: Firing) -> None:
        left = self._per_event[firing.event] - 1
        if left > 0:
            self._per_event[firing.event] = left
        else:
            del self._per_event[firing.event]
        self._idents.discard(firing.ident)


def _is_of(firing: Firing, event: str, file_digest: str) -> bool:
    return firing.event == event and firing.digest == file_digest


def _doubled(backoff: float, first: float, most: float) -> float:
    return first if backoff < first else min(backoff * 2, most)


def _log_fired(firings: list[Firing]) -> None:
    if len(firings) > LOG_EACH_UP_TO:
        first, last = firings[0].event, firings[-1].event
        log.info("events: %d runs accepted (%s ... %s)", len(firings), first, last)
        return
    for firing in firings:
        log.info("events: %s fired on %s (%s)", firing.event, firing.channel, firing.kind)

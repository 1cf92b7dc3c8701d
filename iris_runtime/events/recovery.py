"""Start-up recovery: settling what the previous process left half-way, without running anything
twice and without losing anything.

``state.db`` says how far each firing got (pending, accepted, done); the channel's log says
whether its run actually happened. A run counts as having happened only when its prompt is in the
log as a user message *and* that run's reply was logged with status ``done`` (a silent reply is
one too): a run cut short (a shutdown, a crash, a stop) or one that failed is delivered again,
at most :data:`MAX_DELIVERIES` times in all. So, per unsettled firing:

* it ran: any file left behind is removed (a crash between acceptance and removal);
* pending (never taken by a queue), did not run, file unchanged: left alone; the watcher
  schedules the file again and delivery re-offers it with its recorded prompt;
* pending, and the file was deleted or replaced while Iris was down: forgotten (moot);
* taken by a queue before (accepted or done, or pending again while being delivered again; see
  :attr:`Firing.deliveries`) but did not run (lost with the in-memory queue, or cut short):
  delivered again from the recorded prompt, whatever became of its file (the first delivery
  may have removed it). Its file, if still there, is removed only once that delivery is accepted
  (and the watcher has seen the file, so a late report of it is not taken for a new one), so a
  crash meanwhile loses nothing either;
* the channel's log cannot be read: nothing is decided. The firing is neither re-run nor removed,
  and its file is not delivered either; verification is tried again every
  :data:`VERIFY_RETRY_SECONDS` until the log can be read.

Periodic firings are not replayed (missed instants never are): one still waiting at shutdown is
simply forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from iris_runtime.events.consume import recover_consuming
from iris_runtime.events.files import Folder, digest, folder_problem, read_bounded
from iris_runtime.events.state import Firing, FiringStore

log = logging.getLogger(__name__)

# A run that never completes in its channel's log is delivered at most this many times in all.
MAX_DELIVERIES = 3
VERIFY_RETRY_SECONDS = 30.0
# A reply with this status means the run went to its end (a silent reply is logged "done" too).
FINISHED = "done"

ChannelLog = Callable[[str], list[dict[str, Any]]]
Ident = tuple[str, str]


class Recovery:
    """Settles unsettled firings; ``remove`` removes the fired version of a firing's file (see
    :func:`iris_runtime.events.consume.consume`) and says whether it could."""

    def __init__(
        self,
        data_dir: Path,
        store: FiringStore,
        channel_log: ChannelLog | None,
        *,
        remove: Callable[[Firing, str], bool],
    ) -> None:
        self.data_dir = data_dir
        self._store = store
        self._channel_log = channel_log
        self._remove = remove
        self._unverified: dict[Ident, Firing] = {}
        self._retry_at: datetime | None = None

    def start(self, folders: list[Folder], now: datetime) -> list[Firing]:
        """Settle what the previous process left; returns the firings to deliver again."""
        for folder in folders:
            if folder_problem(self.data_dir, folder) is None:
                for name, outcome in recover_consuming(self.data_dir / folder.rel):
                    log.info(
                        "events: settled %s/%s, left half-removed (%s)", folder.rel, name, outcome
                    )
        return self._settle(self._store.unsettled(), now)

    def blocks(self, ident: Ident) -> bool:
        """Whether this firing waits for its channel's log to be readable."""
        return ident in self._unverified

    def unverified(self) -> set[Ident]:
        return set(self._unverified)

    def next_retry(self) -> datetime | None:
        return self._retry_at if self._unverified else None

    def retry(self, now: datetime) -> tuple[list[Firing], set[Ident]]:
        """Verify again the firings whose log could not be read. Returns the firings to deliver
        again and the pending ones found not to have run (to be offered as usual)."""
        if not self._unverified or self._retry_at is None or now < self._retry_at:
            return [], set()
        rows, self._unverified = list(self._unverified.values()), {}
        pending: set[Ident] = set()
        try:
            revived = self._settle(rows, now, pending=pending)
        except Exception:
            # state.db failed half-way: verify them all again later (each step may repeat).
            self._unverified.update((row.ident, row) for row in rows)
            self._retry_at = now + timedelta(seconds=VERIFY_RETRY_SECONDS)
            raise
        return revived, pending

    # -- one row ------------------------------------------------------------------------------

    def _settle(
        self, rows: list[Firing], now: datetime, *, pending: set[Ident] | None = None
    ) -> list[Firing]:
        """Decide each row (see the module docstring). Pending rows that did not run and whose
        file is unchanged are added to ``pending`` when given, else left to the watcher."""
        revived: list[Firing] = []
        logs: dict[str, set[str] | None] = {}
        for row in rows:
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
            ran = self._ran(row, logs)
            if ran is None:
                self._unverified[row.ident] = row
            elif ran:
                self._remove_leftover(row)
                self._store.settle([row.ident])
            elif row.deliveries > 0:
                revived.extend(self._revive(row))
            elif self._file_digest(row.event) != row.digest:
                self._store.forget([row.ident])  # deleted or replaced while Iris was down
            elif pending is not None:
                pending.add(row.ident)
        if self._unverified:
            self._retry_at = now + timedelta(seconds=VERIFY_RETRY_SECONDS)
        return revived

    def _ran(self, row: Firing, logs: dict[str, set[str] | None]) -> bool | None:
        """Whether the row's run went to its end; None when the channel's log cannot be read."""
        if self._channel_log is None:
            return row.state != "pending"  # nothing to check against: trust the record
        if row.channel not in logs:
            try:
                logs[row.channel] = finished_prompts(self._channel_log(row.channel))
            except Exception as exc:
                logs[row.channel] = None
                log.warning(
                    "events: cannot read %s's log (%s); its unsettled events are neither run "
                    "again nor removed until it can be read (retried every %.0fs)",
                    row.channel,
                    exc,
                    VERIFY_RETRY_SECONDS,
                )
        finished = logs[row.channel]
        return None if finished is None else row.prompt in finished

    def _revive(self, row: Firing) -> list[Firing]:
        # Only deliveries a queue took count: restarts alone must not use up an event's tries.
        delivered = row.deliveries
        if delivered >= MAX_DELIVERIES:
            log.error(
                "events: %s was delivered %d times but never ran to its end on %s; giving up "
                "on it: %s",
                row.event,
                delivered,
                row.channel,
                row.prompt[:200],
            )
            # Its file goes too: kept, it would be scheduled again and start over.
            self._remove_leftover(row)
            self._store.settle([row.ident])
            return []
        log.warning(
            "events: %s was delivered to %s but did not run to its end (Iris stopped first); "
            "delivering it again",
            row.event,
            row.channel,
        )
        return [replace(row, attempts=delivered + 1)]

    def _remove_leftover(self, row: Firing) -> None:
        if self._file_digest(row.event) == row.digest and self._remove(row, "it already ran"):
            log.info("events: removed %s, which had already fired", row.event)

    def _file_digest(self, rel: str) -> str | None:
        try:
            return digest(read_bounded(self.data_dir / rel))
        except OSError:
            return None


def finished_prompts(entries: list[dict[str, Any]]) -> set[str]:
    """The user messages of a channel's log whose run's reply was logged as finished."""
    prompts: dict[str, str] = {}  # runId -> its user message
    finished: set[str] = set()
    for entry in entries:
        if entry.get("type", "message") != "message":
            continue
        run_id = entry.get("runId")
        if entry.get("role") == "user" and entry.get("status") != "cancelled":
            prompts[str(run_id)] = str(entry.get("text"))
        elif entry.get("role") == "assistant" and entry.get("status") == FINISHED:
            prompt = prompts.get(str(run_id))
            if prompt is not None:
                finished.add(prompt)
    return finished

"""Archiving sub-agent sessions: after ``archiveAfterMinutes`` (or right after the announce with
``cleanup: delete``) the session is closed and its transcript renamed ``log.jsonl.deleted.<UTC
timestamp>`` in the same folder, so nothing is lost. Due times are in ``state.db``: a session
due while Iris was down is archived when it starts again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from iris_runtime.engine.core import Engine
from iris_runtime.session_agents.events import subagent_event
from iris_runtime.session_agents.store import RunRecord, SubagentStore

log = logging.getLogger(__name__)

BUSY_RETRY_SECONDS = 30.0  # a session with a follow-up run in flight is archived after it
STORE_FAILURE_SECONDS = 5.0  # state.db failed: look again after this


class Archiver:
    def __init__(
        self,
        engine: Engine,
        store: SubagentStore,
        running_in: Callable[[str], str | None],
        session_lock: AbstractContextManager[Any],
    ) -> None:
        self._engine = engine
        self._store = store
        self._running_in = running_in
        self._session_lock = session_lock  # no run launches while a session is archived
        self._wake = threading.Condition()
        self._changed = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="iris-archive", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        with self._wake:
            self._changed = True
            self._wake.notify_all()

    def _serve(self) -> None:
        while True:
            try:
                for record in self._store.due_archives(time.time()):
                    self._archive_quietly(record)
                due = self._store.next_archive_at()
            except Exception:  # state.db failed: keep the thread, look again shortly
                log.exception("sub-agent archive times could not be read")
                due = time.time() + STORE_FAILURE_SECONDS
            with self._wake:
                if self._stopping:
                    return
                if not self._changed:
                    self._wake.wait(_wait_for(due))
                self._changed = False
                if self._stopping:
                    return

    def _archive_quietly(self, record: RunRecord) -> None:
        try:
            self.archive(record)
        except OSError as exc:
            log.warning("could not archive sub-agent session %s: %s", record.session_key, exc)
            self._store.update_run(record.run_id, archive_at=time.time() + BUSY_RETRY_SECONDS)

    def archive(self, record: RunRecord) -> None:
        with self._session_lock:
            if self._running_in(record.child_channel) is not None:
                self._store.update_run(record.run_id, archive_at=time.time() + BUSY_RETRY_SECONDS)
                return
            self._archive(record)

    def _archive(self, record: RunRecord) -> None:
        now = time.time()
        transcript = self._engine.sessions.log_path(record.child_channel)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        # Missing: never written (a run that could not start), or renamed before a crash.
        with contextlib.suppress(FileNotFoundError):
            os.rename(transcript, f"{transcript}.deleted.{stamp}")
        self._engine.sessions.forget(record.child_channel)
        self._store.update_run(record.run_id, archived=now)
        archived = self._store.run(record.run_id) or record
        self._engine.notify(record.origin_channel, subagent_event(archived, None, "archived"))
        log.info("archived sub-agent session %s", record.session_key)


def _wait_for(due: float | None) -> float | None:
    """How long to sleep until ``due`` (None: until woken), within what a wait accepts."""
    if due is None:
        return None
    return min(max(0.05, due - time.time()), threading.TIMEOUT_MAX)

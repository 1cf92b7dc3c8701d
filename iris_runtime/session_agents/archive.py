"""Archiving sub-agent sessions: after ``archiveAfterMinutes`` (or right after the announce with
``cleanup: delete``) the session is closed and its transcript renamed ``log.jsonl.deleted.<UTC
timestamp>`` in the same folder, so nothing is lost. Due times are in ``state.db``: a session
due while Iris was down is archived when it starts again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from iris_runtime.engine.core import Engine
from iris_runtime.session_agents.events import subagent_event
from iris_runtime.session_agents.store import RunRecord, SubagentStore
from iris_runtime.session_agents.worker import Worker

log = logging.getLogger(__name__)

BUSY_RETRY_SECONDS = 30.0  # a session with a follow-up run in flight is archived after it


class Archiver(Worker):
    name = "iris-archive"

    def __init__(
        self,
        engine: Engine,
        store: SubagentStore,
        running_in: Callable[[str], str | None],
        session_lock: AbstractContextManager[Any],
    ) -> None:
        super().__init__()
        self._engine = engine
        self._store = store
        self._running_in = running_in
        self._session_lock = session_lock  # no run launches while a session is archived

    def round(self) -> float | None:
        for record in self._store.due_archives(time.time()):
            self._archive_quietly(record)
        due = self._store.next_archive_at()
        return None if due is None else due - time.time()

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

"""The run registry and the announce outbox, in ``state.db``.

A sub-agent run is written before its child run is queued, and its announce is written (in the
same transaction that ends the run) before anything is posted. So after a crash at any moment the
next start knows every run: one that was queued or running is announced as interrupted, an
announce not yet delivered is delivered. The announce's key is its run id, which is also what
the origin chat's log records when it is delivered (see :mod:`.delivery`), so a delivery cut off
halfway is finished, never repeated.

Run states: ``queued`` → ``running`` → ``announcing`` (the task ended; the announce step runs)
→ ``ended``. Announce states: ``pending`` → ``logged`` (in the origin's log) → ``delivered``;
or ``skipped`` (``ANNOUNCE_SKIP``). Archive times live on the spawn's row, so archiving survives
restarts too.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from iris_runtime.state_db import open_state_db, transaction

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS subagent_runs (
        run_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        session_key TEXT NOT NULL,
        child_channel TEXT NOT NULL,
        origin_channel TEXT NOT NULL,
        origin_transport TEXT NOT NULL,
        origin_thread TEXT,
        origin_run TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        label TEXT NOT NULL,
        task TEXT NOT NULL,
        model TEXT NOT NULL,
        thinking TEXT NOT NULL,
        cleanup TEXT NOT NULL,
        timeout_seconds REAL NOT NULL,
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,
        outcome TEXT,
        notes TEXT NOT NULL DEFAULT '',
        usage TEXT NOT NULL DEFAULT '{}',
        created REAL NOT NULL,
        started REAL,
        ended REAL,
        archive_at REAL,
        archived REAL
    )""",
    "CREATE INDEX IF NOT EXISTS subagent_runs_origin ON subagent_runs (origin_channel, seq)",
    """CREATE TABLE IF NOT EXISTS subagent_announces (
        key TEXT PRIMARY KEY,
        origin_channel TEXT NOT NULL,
        origin_transport TEXT NOT NULL,
        origin_thread TEXT,
        origin_run TEXT NOT NULL,
        agent TEXT NOT NULL,
        text TEXT NOT NULL,
        usage TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        delivered REAL
    )""",
)
UNFINISHED = ("queued", "running", "announcing")


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    # spawn | send (sessions_send: the caller gets the reply, nothing is announced) | message
    # (/subagents send: announced like the spawn)
    kind: str
    session_key: str
    child_channel: str
    origin_channel: str
    origin_transport: str
    origin_thread: str | None
    origin_run: str  # the run that spawned (or messaged) it: its reply comes first
    agent_id: str
    label: str
    task: str
    model: str
    thinking: str
    cleanup: str
    timeout_seconds: float
    seq: int
    state: str
    outcome: str | None
    notes: str
    usage: str
    created: float
    started: float | None
    ended: float | None
    archive_at: float | None
    archived: float | None

    @property
    def usage_json(self) -> dict[str, Any]:
        loaded = json.loads(self.usage or "{}")
        return loaded if isinstance(loaded, dict) else {}


@dataclass(frozen=True)
class Announce:
    key: str
    origin_channel: str
    origin_transport: str
    origin_thread: str | None
    origin_run: str
    agent: str
    text: str
    usage: str
    state: str
    attempts: int
    created: float
    delivered: float | None


_RUN_COLUMNS = ", ".join(f.name for f in fields(RunRecord))
_ANNOUNCE_COLUMNS = ", ".join(f.name for f in fields(Announce))


class SubagentStore:
    """The two tables. Queries are built from the fixed column lists above and the keyword
    names of this module's own callers, never from input (hence the S608 waivers)."""

    def __init__(self, path: Path) -> None:
        self._conn: sqlite3.Connection = open_state_db(path, _SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- runs ---------------------------------------------------------------------------------

    def add_run(self, record: RunRecord) -> RunRecord:
        """Insert ``record``; a spawn gets the next number among its origin's (``seq``)."""
        with transaction(self._conn, self._lock) as conn:
            seq = record.seq
            if record.kind == "spawn":
                row = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM subagent_runs WHERE origin_channel = ?",
                    (record.origin_channel,),
                ).fetchone()
                seq = int(row[0]) + 1
            values = {**_as_dict(record), "seq": seq}
            conn.execute(
                f"INSERT INTO subagent_runs ({_RUN_COLUMNS}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in values)})",
                tuple(values.values()),
            )
        return RunRecord(**values)

    def update_run(self, run_id: str, **changes: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in changes)
        with transaction(self._conn, self._lock) as conn:
            conn.execute(
                f"UPDATE subagent_runs SET {assignments} WHERE run_id = ?",  # noqa: S608
                (*changes.values(), run_id),
            )

    def run(self, run_id: str) -> RunRecord | None:
        rows = self._runs("WHERE run_id = ?", (run_id,))
        return rows[0] if rows else None

    def spawn_of(self, session_key: str) -> RunRecord | None:
        rows = self._runs("WHERE session_key = ? AND kind = 'spawn'", (session_key,))
        return rows[0] if rows else None

    def runs_of_session(self, session_key: str) -> list[RunRecord]:
        return self._runs("WHERE session_key = ? ORDER BY created", (session_key,))

    def spawns_of(self, origin_channel: str) -> list[RunRecord]:
        """The sub-agents spawned from a chat, in spawn order (archived ones included)."""
        return self._runs(
            "WHERE origin_channel = ? AND kind = 'spawn' ORDER BY seq", (origin_channel,)
        )

    def unfinished(self) -> list[RunRecord]:
        marks = ", ".join("?" for _ in UNFINISHED)
        return self._runs(f"WHERE state IN ({marks}) ORDER BY created", UNFINISHED)

    def due_archives(self, now: float) -> list[RunRecord]:
        return self._runs(
            "WHERE kind = 'spawn' AND archived IS NULL AND archive_at IS NOT NULL "
            "AND archive_at <= ? ORDER BY archive_at",
            (now,),
        )

    def next_archive_at(self) -> float | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT MIN(archive_at) FROM subagent_runs WHERE kind = 'spawn' "
                "AND archived IS NULL AND archive_at IS NOT NULL"
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def _runs(self, where: str, params: tuple[Any, ...]) -> list[RunRecord]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM subagent_runs {where}",  # noqa: S608
                params,
            ).fetchall()
        return [RunRecord(*row) for row in rows]

    # -- announces ----------------------------------------------------------------------------

    def end_run(self, run_id: str, announce: Announce, **changes: Any) -> None:
        """End the run and record its announce in one transaction (a second call for the same
        run changes nothing: the announce is already there)."""
        assignments = ", ".join(f"{name} = ?" for name in ("state", *changes))
        values = _as_dict(announce)
        with transaction(self._conn, self._lock) as conn:
            conn.execute(
                f"UPDATE subagent_runs SET {assignments} WHERE run_id = ?",  # noqa: S608
                ("ended", *changes.values(), run_id),
            )
            conn.execute(
                f"INSERT OR IGNORE INTO subagent_announces ({_ANNOUNCE_COLUMNS}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in values)})",
                tuple(values.values()),
            )

    def undelivered(self) -> list[Announce]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_ANNOUNCE_COLUMNS} FROM subagent_announces "  # noqa: S608
                "WHERE state IN ('pending', 'logged') ORDER BY created"
            ).fetchall()
        return [Announce(*row) for row in rows]

    def announce(self, key: str) -> Announce | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_ANNOUNCE_COLUMNS} FROM subagent_announces WHERE key = ?",  # noqa: S608
                (key,),
            ).fetchone()
        return None if row is None else Announce(*row)

    def set_announce(self, key: str, state: str, **changes: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in ("state", *changes))
        with transaction(self._conn, self._lock) as conn:
            conn.execute(
                f"UPDATE subagent_announces SET {assignments} WHERE key = ?",  # noqa: S608
                (state, *changes.values(), key),
            )


def _as_dict(record: RunRecord | Announce) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in fields(record)}

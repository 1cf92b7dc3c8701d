"""Firings in ``state.db``: the record that lets event delivery lose nothing and run nothing twice.

A firing is one run of one event: ``(event, key)``, where ``event`` is the file's path relative to
the data dir and ``key`` names the instant (plus, for files that are consumed, a digest of the
file, so a new file with the same name is a new firing). Its state moves

    pending   written before the channel's queue is asked to take the run
    accepted  the queue took it; the file (immediate, one-shot) may now be removed
    done      the file is gone (or, for periodic events, there is none to remove)

so a crash at any point is recognisable on the next start. ``verified`` is set once the run is
seen in the channel's log: a run that was accepted but then lost with the in-memory queue (a crash
or a shutdown before it started) is delivered again from the prompt kept here.

SQLite in WAL mode with ``synchronous=FULL``: a state change is on disk before the file it
guards is touched, even across a power cut. Several writers (other parts of Iris, the CLI) may
share the database; each transaction is short.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from iris_runtime import data_layout
from iris_runtime.private_files import UnsafeFile, check_private_path
from iris_runtime.state_db import immediate, open_state_db

DB_NAME = data_layout.STATE_DB
FiringState = Literal["pending", "accepted", "done"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS event_firings (
    event    TEXT NOT NULL,
    key      TEXT NOT NULL,
    kind     TEXT NOT NULL,
    channel  TEXT NOT NULL,
    prompt   TEXT NOT NULL,
    digest   TEXT NOT NULL,
    state    TEXT NOT NULL CHECK (state IN ('pending', 'accepted', 'done')),
    verified INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 1,
    updated  REAL NOT NULL,
    PRIMARY KEY (event, key)
)
"""
_COLUMNS = "event, key, kind, channel, prompt, digest, state, verified, attempts"
# Two bound values per pair, well under SQLite's smallest limit on bound values (999).
_PAIRS_PER_QUERY = 400


@dataclass(frozen=True)
class Firing:
    event: str
    key: str
    kind: str
    channel: str
    prompt: str
    digest: str
    state: FiringState = "pending"
    verified: bool = False
    attempts: int = 1

    @property
    def ident(self) -> tuple[str, str]:
        return (self.event, self.key)

    @property
    def deliveries(self) -> int:
        """How many times a channel's queue took this firing, as far as its record knows.
        ``attempts`` counts the deliveries started (start-up raises it to deliver one again);
        the latest is taken once the firing is no longer pending. A firing taken before may have
        lost its file to that delivery: its record alone then says what to run."""
        return self.attempts - 1 if self.state == "pending" else self.attempts

    def with_state(self, state: FiringState) -> Firing:
        return replace(self, state=state)


class FiringStore:
    """The ``event_firings`` table. Opened lazily by :meth:`open`; safe to share among threads."""

    def __init__(self, path: Path, *, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self._now = now  # epoch seconds for ``updated`` (the service's clock, so tests drive it)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def open(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            self._conn = open_state_db(self.path, [_SCHEMA])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the firing store is not open")
            with immediate(self._conn) as conn:
                yield conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads: no transaction of our own (in WAL mode a read takes no
        write lock, so readers never wait for writers, nor writers for them)."""
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the firing store is not open")
            yield self._conn

    def get(self, event: str, key: str) -> Firing | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM event_firings WHERE event = ? AND key = ?",  # noqa: S608
                (event, key),
            ).fetchone()
        return _firing(row) if row else None

    def get_many(self, idents: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Firing]:
        """The stored firings among ``idents`` (a few queries, however many are asked for)."""
        wanted = list(dict.fromkeys(idents))
        found: dict[tuple[str, str], Firing] = {}
        with self._read() as conn:
            for start in range(0, len(wanted), _PAIRS_PER_QUERY):
                chunk = wanted[start : start + _PAIRS_PER_QUERY]
                pairs = ", ".join("(?, ?)" for _ in chunk)
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM event_firings "  # noqa: S608
                    f"WHERE (event, key) IN (VALUES {pairs})",
                    [part for ident in chunk for part in ident],
                ).fetchall()
                for row in rows:
                    firing = _firing(row)
                    found[firing.ident] = firing
        return found

    def put(self, firings: Iterable[Firing]) -> None:
        """Insert or overwrite these firings as given (one transaction)."""
        now = self._now()
        with self._transaction() as conn:
            conn.executemany(
                f"INSERT OR REPLACE INTO event_firings ({_COLUMNS}, updated) "  # noqa: S608
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (*_values(f), now)
                    for f in firings  # materialised inside the transaction
                ],
            )

    def set_state(self, idents: Iterable[tuple[str, str]], state: FiringState) -> None:
        now = self._now()
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE event_firings SET state = ?, updated = ? WHERE event = ? AND key = ?",
                [(state, now, event, key) for event, key in idents],
            )

    def mark_verified(self, idents: Iterable[tuple[str, str]]) -> None:
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE event_firings SET verified = 1 WHERE event = ? AND key = ?",
                list(idents),
            )

    def finish_periodic(self, firings: Iterable[Firing]) -> None:
        """Mark periodic firings done and forget the event's earlier instants: missed instants
        are never replayed, so only the latest one is worth remembering."""
        now = self._now()
        rows = [(f.event, f.key) for f in firings]
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE event_firings SET state = 'done', verified = 1, updated = ? "
                "WHERE event = ? AND key = ?",
                [(now, event, key) for event, key in rows],
            )
            conn.executemany(
                "DELETE FROM event_firings WHERE event = ? AND kind = 'periodic' AND key < ?",
                rows,
            )

    def settle(self, idents: Iterable[tuple[str, str]]) -> None:
        """Nothing more will happen to these firings (they ran, or were given up): done and
        verified, so start-up no longer looks at them and pruning forgets them in time."""
        now = self._now()
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE event_firings SET state = 'done', verified = 1, updated = ? "
                "WHERE event = ? AND key = ?",
                [(now, event, key) for event, key in idents],
            )

    def forget(self, idents: Iterable[tuple[str, str]]) -> None:
        with self._transaction() as conn:
            conn.executemany("DELETE FROM event_firings WHERE event = ? AND key = ?", list(idents))

    def forget_pending(self, idents: Iterable[tuple[str, str]]) -> None:
        """Forget firings that never reached a queue (cancelled); a firing that was accepted
        meanwhile keeps its record."""
        with self._transaction() as conn:
            conn.executemany(
                "DELETE FROM event_firings WHERE event = ? AND key = ? AND state = 'pending'",
                list(idents),
            )

    def unsettled(self) -> list[Firing]:
        """Firings a previous process may have left half-way: not yet done, or done but never
        seen running."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM event_firings "  # noqa: S608
                "WHERE state != 'done' OR verified = 0 ORDER BY updated"
            ).fetchall()
        return [_firing(row) for row in rows]

    def prune(self, older_than: float, *, keep: Collection[tuple[str, str]] = ()) -> int:
        """Forget firings last touched before ``older_than`` (epoch seconds): finished ones, and
        pending ones (their file was rejected, or deleted while Iris was down) except those in
        ``keep`` (still waiting for their queue)."""
        with self._transaction() as conn:
            removed = conn.execute(
                "DELETE FROM event_firings WHERE state = 'done' AND updated < ?", (older_than,)
            ).rowcount
            stale = conn.execute(
                "SELECT event, key FROM event_firings WHERE state = 'pending' AND updated < ?",
                (older_than,),
            ).fetchall()
            moot = [(str(e), str(k)) for e, k in stale if (e, k) not in keep]
            conn.executemany("DELETE FROM event_firings WHERE event = ? AND key = ?", moot)
        return removed + len(moot)

    def count(self) -> int:
        with self._read() as conn:
            (total,) = conn.execute("SELECT COUNT(*) FROM event_firings").fetchone()
        return int(total)


def database_problem(path: Path) -> str | None:
    """What is wrong with ``state.db`` at ``path`` (None: nothing, or it does not exist yet),
    checked read-only, for ``iris doctor``."""
    if not path.exists():
        return None
    try:
        check_private_path(path, sqlite=True)  # what the store would refuse to open
    except UnsafeFile as exc:
        return exc.message
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
        try:
            (verdict,) = conn.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                return f"integrity check failed: {verdict}"
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _values(f: Firing) -> tuple[object, ...]:
    return (
        f.event,
        f.key,
        f.kind,
        f.channel,
        f.prompt,
        f.digest,
        f.state,
        int(f.verified),
        f.attempts,
    )


def _firing(row: tuple[object, ...]) -> Firing:
    event, key, kind, channel, prompt, digest, state, verified, attempts = row
    return Firing(
        str(event),
        str(key),
        str(kind),
        str(channel),
        str(prompt),
        str(digest),
        state,  # type: ignore[arg-type]  # the CHECK constraint holds it to the three states
        bool(verified),
        int(str(attempts)),
    )

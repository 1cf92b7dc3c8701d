"""``state.db``: the one SQLite database in the data dir, shared by the parts of Iris that must
remember something across a crash (sub-agent runs and their announces, event firings, supervised
processes). Each part owns its tables; this module only opens the database the way all of them
need it: WAL, ``synchronous=FULL`` (a commit is on disk before the work it guards goes on),
private to Iris's user, and never through a symlink planted by someone else.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from iris_runtime.private_files import adopt_parent_owner, check_private_path, chmod_private_db


def open_state_db(path: Path, schema: Iterable[str]) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), shareable among threads
    behind the caller's lock, with ``schema`` (``CREATE … IF NOT EXISTS``) applied."""
    check_private_path(path, sqlite=True)
    created = not path.exists()
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        for statement in schema:
            conn.execute(statement)
        chmod_private_db(path)
    except BaseException:
        conn.close()  # e.g. "file is not a database": nothing half-open is kept
        raise
    if created:
        adopt_parent_owner(path)
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection, lock: threading.Lock) -> Iterator[sqlite3.Connection]:
    """:func:`immediate` under ``lock``."""
    with lock, immediate(conn):
        yield conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any error). The caller holds the lock
    that serialises its uses of ``conn``."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back already (a full disk, I/O error)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")

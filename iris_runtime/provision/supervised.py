"""Supervised processes in ``state.db``: what the CLI asks for and what the supervisor reports.

Where systemd is not PID 1, Iris itself keeps its sub-agents running (:mod:`.supervisor`). The
two sides never talk directly; they share two tables in the data dir's ``state.db``:

``supervised_processes``, one row per agent. The CLI writes the *wish* (command, environment,
working dir, log path, ``desired`` = ``running`` | ``absent``); the supervisor writes the
*report* (``pid``, ``pid_start_time``, ``state``, ``restarts``, ``last_exit``). Each side only
ever updates its own columns, so neither overwrites the other. ``revision`` grows with every
install, so the supervisor notices a changed wish for a row it is already running.

``supervisor_heartbeat``, one row: the pid (and its start time) of the process running the
supervisor and when it last looked at the table. The CLI reads it to tell whether anybody will
act on a row it writes.

``pid_start_time`` is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot): together with
the pid it names one process, so a pid recycled by the kernel after ours died is never signalled.

The environment holds literal, non-secret values by contract (see :mod:`.launch`); a row is no
place for a token, and :func:`check_environment` refuses the obvious ones.

SQLite in WAL mode with ``synchronous=FULL`` like the rest of ``state.db``; several processes
(Iris, any number of CLI commands) share it, and every transaction is short.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from iris_runtime import data_layout
from iris_runtime.errors import ProvisionError

if TYPE_CHECKING:
    # sqlite3 loads with the first connection: `iris serve`'s master only reads settings here.
    import sqlite3

DB_NAME = data_layout.STATE_DB  # shared with the event firings (iris_runtime.events.state)
Desired = Literal["running", "absent"]
ProcessState = Literal["starting", "running", "backoff", "stopped", "failed"]

# A heartbeat older than this means the supervisor is gone (or hung), even if its pid lives.
# The supervisor beats every 2 s from a thread of its own that no stop of a child delays (see
# supervisor.HEARTBEAT_SECONDS): this leaves room for any one slow step (a state.db write waits
# up to 10 s for a busy database). A supervisor that died is noticed at once anyway: its pid
# (with its start time) no longer names a live process.
HEARTBEAT_STALE_SECONDS = 30.0

# Environment names that carry secrets in Iris's own configuration; a supervised row must not
# hold a value for them (an agent reads its token from <home>/api-token instead).
SECRET_ENVIRONMENT = frozenset({"IRIS_API_TOKEN", "IRIS_VAULT_TOKEN", "IRIS_VAULT_SECRET_ID"})

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS supervised_processes (
        name           TEXT PRIMARY KEY,
        command        TEXT NOT NULL,
        environment    TEXT NOT NULL,
        cwd            TEXT NOT NULL,
        log_path       TEXT NOT NULL,
        desired        TEXT NOT NULL CHECK (desired IN ('running', 'absent')),
        revision       INTEGER NOT NULL DEFAULT 1,
        pid            INTEGER,
        pid_start_time INTEGER,
        state          TEXT NOT NULL DEFAULT 'starting'
                       CHECK (state IN ('starting', 'running', 'backoff', 'stopped', 'failed')),
        restarts       INTEGER NOT NULL DEFAULT 0,
        last_exit      TEXT,
        updated        REAL NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS supervisor_heartbeat (
        id             INTEGER PRIMARY KEY CHECK (id = 1),
        pid            INTEGER NOT NULL,
        pid_start_time INTEGER NOT NULL,
        heartbeat      REAL NOT NULL
    )
    """,
)
_COLUMNS = (
    "name, command, environment, cwd, log_path, desired, revision, pid, pid_start_time, "
    "state, restarts, last_exit, updated"
)


@dataclass(frozen=True)
class SupervisedProcess:
    """One row of ``supervised_processes``."""

    name: str
    command: tuple[str, ...]
    environment: Mapping[str, str]
    cwd: Path
    log_path: Path
    desired: Desired = "running"
    revision: int = 1
    pid: int | None = None
    pid_start_time: int | None = None
    state: ProcessState = "starting"
    restarts: int = 0
    last_exit: str | None = None
    updated: float = 0.0
    problem: str | None = None  # the stored wish cannot be read (the supervisor marks it failed)


@dataclass(frozen=True)
class SupervisorBeat:
    pid: int
    pid_start_time: int
    heartbeat: float  # epoch seconds

    def is_alive(self, now: float | None = None) -> bool:
        """Recent enough, and the process that wrote it still exists (same start time)."""
        now = time.time() if now is None else now
        fresh = now - self.heartbeat < HEARTBEAT_STALE_SECONDS
        return fresh and process_alive(self.pid, self.pid_start_time)


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from field 3 on (index 0 is the state, index 19 the start time)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no such process (or no /proc)
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": split after
    # the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields if len(fields) > 19 else None


def process_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot); None when
    there is no such process. A zombie still has one: it exists until it is reaped."""
    fields = _stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])
    except ValueError:
        return None


def process_alive(pid: int, start_time: int | None) -> bool:
    """``pid`` is still the process that started at ``start_time``, and not a zombie (a dead
    process nobody reaped yet, which a PID 1 that does not reap keeps around for good)."""
    fields = _stat_fields(pid)
    if fields is None or start_time is None or fields[0] == "Z":
        return False
    return fields[19] == str(start_time)


def check_environment(environment: Mapping[str, str]) -> None:
    """Refuse a secret in a row's environment (rows are readable by every CLI command)."""
    leaked = sorted(k for k in environment if k in SECRET_ENVIRONMENT and environment[k])
    if leaked:
        raise ProvisionError(
            f"refusing to store {', '.join(leaked)} in state.db: a supervised agent's "
            "environment holds no secret values (its API token belongs in <home>/api-token)"
        )


class SupervisedStore:
    """``supervised_processes`` and ``supervisor_heartbeat`` in ``<data_dir>/state.db``.

    Opened lazily (the first call opens it); safe to share among threads. A ``state.db`` that
    SQLite cannot use raises :class:`ProvisionError` naming the file and what to do.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / DB_NAME
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def __enter__(self) -> SupervisedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self.path.parent.is_dir():
                raise ProvisionError(f"the data dir {self.path.parent} does not exist")
            # Here, not at the top: state_db loads sqlite3 (see the TYPE_CHECKING import).
            from iris_runtime.state_db import open_state_db

            self._conn = open_state_db(self.path, _SCHEMA)
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._unusable_is_clear():
            from iris_runtime.state_db import immediate  # (see _open)

            with immediate(self._open()) as conn:
                yield conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._unusable_is_clear():
            yield self._open()

    @contextmanager
    def _unusable_is_clear(self) -> Iterator[None]:
        import sqlite3

        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise ProvisionError(
                    f"{self.path} is busy (another writer held it): {exc}"
                ) from exc
            raise self._unusable(exc) from exc
        except sqlite3.DatabaseError as exc:
            raise self._unusable(exc) from exc

    def _unusable(self, exc: Exception) -> ProvisionError:
        self.close()  # a later call tries again from scratch
        return ProvisionError(
            f"{self.path} is unusable ({exc}); `iris doctor` checks it. Move it aside to "
            "start over (supervised agents and pending event firings are forgotten)."
        )

    # -- the wish (CLI side) -----------------------------------------------------------------

    def request(
        self,
        name: str,
        command: tuple[str, ...],
        environment: Mapping[str, str],
        cwd: Path,
        log_path: Path,
    ) -> SupervisedProcess:
        """Ask for ``name`` to run with this command. A new row starts from scratch; an
        existing one gets the new wish, a new revision and a fresh report (so whoever waits
        on it sees only what happens from now on)."""
        check_environment(environment)
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO supervised_processes (name, command, environment, cwd, log_path, "
                "desired, updated) VALUES (?, ?, ?, ?, ?, 'running', ?) "
                "ON CONFLICT (name) DO UPDATE SET command = excluded.command, "
                "environment = excluded.environment, cwd = excluded.cwd, "
                "log_path = excluded.log_path, desired = 'running', revision = revision + 1, "
                "restarts = 0, last_exit = NULL, updated = excluded.updated, state = 'starting'",
                (
                    name,
                    json.dumps(list(command)),
                    json.dumps(dict(environment), sort_keys=True),
                    str(cwd),
                    str(log_path),
                    time.time(),
                ),
            )
            row = _one(conn, name)
        assert row is not None
        return row

    def set_desired(self, name: str, desired: Desired) -> bool:
        """True when the row exists."""
        with self._transaction() as conn:
            changed = conn.execute(
                "UPDATE supervised_processes SET desired = ?, updated = ? WHERE name = ?",
                (desired, time.time(), name),
            ).rowcount
        return changed > 0

    def delete(self, name: str) -> bool:
        """Forget a row that is still desired ``absent`` (one installed again meanwhile stays)."""
        with self._transaction() as conn:
            removed = conn.execute(
                "DELETE FROM supervised_processes WHERE name = ? AND desired = 'absent'", (name,)
            ).rowcount
        return removed > 0

    # -- reads ---------------------------------------------------------------------------------

    def get(self, name: str) -> SupervisedProcess | None:
        with self._read() as conn:
            return _one(conn, name)

    def all(self) -> list[SupervisedProcess]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM supervised_processes ORDER BY name"  # noqa: S608
            ).fetchall()
        return [_process(row) for row in rows]

    # -- the report (supervisor side) ----------------------------------------------------------

    def report(
        self,
        name: str,
        *,
        state: ProcessState,
        pid: int | None,
        pid_start_time: int | None,
        restarts: int | None = None,
        last_exit: str | None = None,
        revision: int | None = None,
    ) -> None:
        """Write what the supervisor sees. ``restarts``/``last_exit`` are kept when None.
        With ``revision``, only a row still at that revision is touched: a report about a
        process started for an older wish must not overwrite the fresh one."""
        sets = "state = ?, pid = ?, pid_start_time = ?, updated = ?"
        values: list[object] = [state, pid, pid_start_time, time.time()]
        if restarts is not None:
            sets += ", restarts = ?"
            values.append(restarts)
        if last_exit is not None:
            sets += ", last_exit = ?"
            values.append(last_exit)
        where = "name = ?"
        values.append(name)
        if revision is not None:
            where += " AND revision = ?"
            values.append(revision)
        with self._transaction() as conn:
            conn.execute(
                f"UPDATE supervised_processes SET {sets} WHERE {where}",  # noqa: S608
                values,
            )

    def beat(self, pid: int, pid_start_time: int) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO supervisor_heartbeat (id, pid, pid_start_time, heartbeat) "
                "VALUES (1, ?, ?, ?)",
                (pid, pid_start_time, time.time()),
            )

    def clear_beat(self, pid: int) -> None:
        """The supervisor is stopping: forget its heartbeat (only its own)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM supervisor_heartbeat WHERE pid = ?", (pid,))

    def supervisor(self) -> SupervisorBeat | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT pid, pid_start_time, heartbeat FROM supervisor_heartbeat WHERE id = 1"
            ).fetchone()
        if row is None:
            return None
        return SupervisorBeat(int(row[0]), int(row[1]), float(row[2]))

    def supervisor_alive(self) -> bool:
        beat = self.supervisor()
        return beat is not None and beat.is_alive()


def _one(conn: sqlite3.Connection, name: str) -> SupervisedProcess | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM supervised_processes WHERE name = ?",  # noqa: S608
        (name,),
    ).fetchone()
    return _process(row) if row else None


def _process(row: tuple[object, ...]) -> SupervisedProcess:
    (name, command, environment, cwd, log_path, desired, revision) = row[:7]
    (pid, pid_start_time, state, restarts, last_exit, updated) = row[7:]
    argv: tuple[str, ...] = ()
    env: dict[str, str] = {}
    problem = None
    try:
        parsed_argv = json.loads(str(command))
        parsed_env = json.loads(str(environment))
        if not (
            isinstance(parsed_argv, list)
            and parsed_argv
            and all(isinstance(a, str) for a in parsed_argv)
        ):
            raise ValueError("the command is not a non-empty list of strings")
        if not (
            isinstance(parsed_env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in parsed_env.items())
        ):
            raise ValueError("the environment is not a map of strings")
        argv, env = tuple(parsed_argv), parsed_env
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        problem = f"unreadable row in state.db: {exc}"
    return SupervisedProcess(
        name=str(name),
        command=argv,
        environment=env,
        cwd=Path(str(cwd)),
        log_path=Path(str(log_path)),
        desired=desired,  # type: ignore[arg-type]  # held to the two values by CHECK
        revision=int(str(revision)),
        pid=None if pid is None else int(str(pid)),
        pid_start_time=None if pid_start_time is None else int(str(pid_start_time)),
        state=state,  # type: ignore[arg-type]  # held to the five states by CHECK
        restarts=int(str(restarts)),
        last_exit=None if last_exit is None else str(last_exit),
        updated=float(str(updated)),
        problem=problem,
    )

"""The process supervisor: Iris keeps its sub-agents running where systemd is not PID 1.

It runs inside ``iris serve`` (in the gunicorn worker, started and stopped with the
:class:`~iris_runtime.runtime.Runtime`), as one thread that every ``poll_seconds`` reconciles
the ``supervised_processes`` table (:mod:`.supervised`) with its children:

- a row desired ``running`` without a live child gets one; a child that exits is restarted after
  a backoff (1 s, 2 s, 4 s ... at most 30 s; back to 1 s once a child has run for 60 s), and what
  is left of its process group (a gunicorn worker whose master died) is killed first, so the
  agent's ports are free again;
- a row desired ``absent`` has its process group stopped, then the row is deleted.

Stopping a process group never blocks the loop: the group gets SIGTERM, and later passes (every
0.1 s while any stop is pending) send SIGKILL once ``STOP_GRACE_SECONDS`` have passed and finish
the work (delete the row, start the replacement) once the group is gone. So an agent that
ignores SIGTERM delays only its own row, never the others.

A second thread writes the heartbeat every ``HEARTBEAT_SECONDS``, so a CLI knows somebody will
act on what it writes. It beats as long as the loop keeps making passes (it stops beating if
the loop hangs for ``STALL_SECONDS``, so a hung supervisor goes stale), and during
:meth:`Supervisor.stop` until the children are stopped.

Children get a session (and so a process group) of their own, only a minimal environment plus
the row's literal values (never Iris's own: it holds Iris's API token, its LLM keys and the chat
platforms' tokens), no inherited file descriptors (Iris's listening sockets), stdin from
``/dev/null`` and stdout/stderr appended to the agent's log file (mode 0600).

When Iris stops, every child's process group (and every group still being stopped) gets SIGTERM
at once, then SIGKILL after one shared ``SHUTDOWN_GRACE_SECONDS``, so the whole stop fits in
gunicorn's ``graceful_timeout`` (15 s, see :mod:`iris_runtime.cli.serve`); the rows stay desired
``running``, so the agents start again with Iris. When Iris dies without
stopping them (``kill -9``), they live on in their own sessions, and the next supervisor adopts
each one that was reported ``running`` for the row's current wish and is still alive with the
recorded start time: it watches it from ``/proc`` (it is not our child, so its exit status is
unknown) and restarts it when it ends. An adopted agent keeps its runs: a delegated request in
progress finishes and its reply stays in the agent's job log for ``iris bridge recover``. An
orphan that was never reported running for the current wish, or whose leader is gone while the
rest of its group lives on, is stopped and replaced by a fresh child.

One supervisor per data dir: a ``flock`` on ``run/supervisor.lock`` makes a second runtime on
the same data dir stand by instead of fighting over the same rows.

Logs: ``<home>/logs/agent.log`` (the row's ``log_path``), mode 0600, with the supervisor's own
lines (start, exit, restart) among the agent's; past 10 MB it moves to ``agent.log.1`` at the
next start, or is copied there and truncated while the agent runs (checked every 30 s).

``IRIS_SUPERVISOR_BACKOFF_MS`` (default 1000) sets the first restart delay (tests use a short
one); the cap stays 30 s.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.provision.supervised import (
    SupervisedProcess,
    SupervisedStore,
    process_alive,
    process_start_time,
)

log = logging.getLogger(__name__)

BACKOFF_CAP_SECONDS = 30.0
BACKOFF_RESET_AFTER_SECONDS = 60.0  # a child that ran this long crashed "for the first time"
STARTED_AFTER_SECONDS = 1.0  # alive this long after exec: reported ``running``
STOP_GRACE_SECONDS = 10.0  # a removed or replaced agent: SIGTERM → SIGKILL
LEFTOVER_GRACE_SECONDS = 5.0  # how long to wait for a killed group to vanish
# Iris stopping: one deadline for all children, SIGTERM → SIGKILL, then the wait for the killed.
# Their sum (7 s) plus the in-progress pass (short: nothing in it waits on a child) stays well
# inside gunicorn's graceful_timeout of 15 s, which also covers draining requests first.
SHUTDOWN_GRACE_SECONDS = 5.0
SHUTDOWN_KILL_WAIT_SECONDS = 2.0
STOP_POLL_SECONDS = 0.1  # the loop's period while some group is being stopped
HEARTBEAT_SECONDS = 2.0  # well under supervised.HEARTBEAT_STALE_SECONDS (30 s)
STALL_SECONDS = 20.0  # no pass for this long: the loop hangs, stop beating
LOG_ROTATE_BYTES = 10 * 1024 * 1024
LOG_CHECK_SECONDS = 30.0  # how often a running child's log size is looked at
# What a child inherits from Iris's environment: enough for a Python program to run and format
# text and times; nothing that configures Iris or holds a credential.
BASE_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
)


def backoff_from(env: Mapping[str, str]) -> float:
    """The first restart delay in seconds from ``IRIS_SUPERVISOR_BACKOFF_MS``."""
    raw = env.get("IRIS_SUPERVISOR_BACKOFF_MS", "").strip()
    if not raw:
        return 1.0
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"IRIS_SUPERVISOR_BACKOFF_MS must be an integer, not {raw!r}") from None
    if value < 1:
        raise ConfigError(f"IRIS_SUPERVISOR_BACKOFF_MS must be at least 1, not {value}")
    return value / 1000.0


def child_environment(base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The few harmless variables of ``base`` (Iris's environment) plus the agent's own."""
    env = {name: base[name] for name in BASE_VARIABLES if name in base}
    env.setdefault("PATH", os.defpath)
    env.update(own)
    return env


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"


def group_is_ours(pid: int, start_time: int | None) -> bool:
    """Whether process group ``pid`` (we start every child as a session leader, so its pid is
    its group id) can only be the one we started. Yes when its leader is still the process we
    recorded; yes when no process has that pid (the kernel keeps a pid allocated while any
    member of a group of that id lives, so any members left are ours); no when another
    process now has the pid."""
    now = process_start_time(pid)
    return now is None or (start_time is not None and now == start_time)


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process remains in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Members exist, but a zombie nobody has reaped yet also counts for kill(): look closer.
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _runs(pid: int, command: tuple[str, ...], cwd: Path) -> bool:
    """Whether ``pid`` runs ``command`` in ``cwd`` (a program that rewrites its own title does
    not match, and is then replaced rather than adopted)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        where = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    return tuple(os.fsdecode(arg) for arg in argv) == command and where == cwd.resolve()


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@dataclass
class _Child:
    pid: int
    popen: subprocess.Popen[bytes] | None  # None: adopted, left running by an earlier Iris
    revision: int
    start_time: int | None
    started: float  # monotonic
    reported_running: bool = False
    next_log_check: float = 0.0  # monotonic

    def exit_status(self) -> str | None:
        """How it ended, or None while it runs. An adopted process is not our child: we see
        it end in ``/proc`` but cannot learn its status."""
        if self.popen is not None:
            code = self.popen.poll()
            return None if code is None else describe_exit(code)
        if process_alive(self.pid, self.start_time):
            return None
        return "ended (status unknown: adopted from an earlier Iris)"


@dataclass
class _Backoff:
    failures: int = 0
    not_before: float = 0.0  # monotonic


@dataclass
class _Group:
    """A process group being stopped: our child (``popen``) or an orphan of an earlier Iris."""

    name: str
    pid: int
    start_time: int | None
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None and self.popen.poll() is None:
            return True
        return group_is_ours(self.pid, self.start_time) and group_alive(self.pid)


def stop_groups(
    groups: list[_Group],
    grace: float = STOP_GRACE_SECONDS,
    kill_wait: float = LEFTOVER_GRACE_SECONDS,
) -> None:
    """SIGTERM every group at once, wait up to ``grace`` for all of them (one deadline),
    SIGKILL what is left and wait up to ``kill_wait`` for it to vanish."""
    groups = [g for g in groups if group_is_ours(g.pid, g.start_time) or g.popen is not None]
    for group in groups:
        signal_group(group.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(g.alive() for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    for group in groups:
        if group.alive():
            log.warning("agent %s (pid %d) ignored SIGTERM; killing it", group.name, group.pid)
            signal_group(group.pid, signal.SIGKILL)
    deadline = time.monotonic() + kill_wait
    while any(g.alive() for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)


@dataclass
class _Stop:
    """A process group the loop is stopping without waiting for it: SIGTERM was sent (or
    SIGKILL, when ``give_up_at`` is set); ``then`` runs once the group is gone."""

    group: _Group
    kill_at: float  # monotonic: SIGKILL from then on
    give_up_at: float | None = None  # monotonic, once SIGKILLed: stop waiting then
    then: Callable[[], None] | None = None


def stop_recorded(name: str, pid: int, start_time: int | None) -> None:
    """Stop the process group a row recorded, from any process (the CLI when no Iris runs):
    only when ``pid`` still names the process started then, or nothing at all."""
    stop_groups([_Group(name, pid, start_time)])


def open_log(path: Path, *, rotate: bool = True) -> int:
    """The agent's log for appending (0600). With ``rotate`` (a child about to start), one past
    ``LOG_ROTATE_BYTES`` is moved to ``<log>.1`` first; never while a child may be writing
    to it, which would keep writing to the moved file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if rotate and path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def rotate_log(path: Path) -> bool:
    """Keep a running agent's log bounded: copy it to ``<log>.1`` (0600) and truncate it. The
    child writes through an ``O_APPEND`` descriptor, so it carries on at the new end; lines
    written between the copy and the truncation are lost, which is the price of not having
    to restart the agent."""
    try:
        if path.stat().st_size <= LOG_ROTATE_BYTES:
            return False
        target = path.with_name(path.name + ".1")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an older .1 may have been made by something else
        with path.open("rb") as source, os.fdopen(fd, "wb") as copy:
            shutil.copyfileobj(source, copy)
        os.truncate(path, 0)
    except OSError:
        return False
    return True


def note(path: Path, line: str) -> None:
    """Append one supervisor line to an agent's log (what happened to it, next to its output)."""
    try:
        fd = open_log(path, rotate=False)  # the agent may be running and writing to it
    except OSError:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with contextlib.suppress(OSError):
        os.write(fd, f"{stamp} [supervisor] {line}\n".encode())
    os.close(fd)


class Supervisor:
    """Keeps the rows of ``<data_dir>/state.db`` desired ``running`` running."""

    def __init__(
        self,
        data_dir: Path,
        poll_seconds: float = 0.5,
        *,
        backoff_seconds: float = 1.0,
        base_environment: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.poll_seconds = poll_seconds
        self.backoff_seconds = backoff_seconds
        self._base = dict(base_environment or {})
        self._store = SupervisedStore(data_dir)
        self._children: dict[str, _Child] = {}
        self._backoff: dict[str, _Backoff] = {}
        self._stops: list[_Stop] = []  # groups being stopped, owned by the loop's thread
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_stopping = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._progress = 0.0  # monotonic: when the loop last began a pass
        self._lock_file: IO[bytes] | None = None
        self._pid = os.getpid()
        self._pid_start = 0
        self._last_problem = ""
        self._standing_by = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Supervisor:
        return cls(
            settings.data_dir,
            backoff_seconds=backoff_from(settings.env),
            base_environment=settings.env,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        # The pid of the process that runs the thread (the gunicorn worker, after fork).
        self._pid = os.getpid()
        self._pid_start = process_start_time(self._pid) or 0
        self._stopping.clear()
        self._beat_stopping.clear()
        self._progress = time.monotonic()
        # Beat once before returning, so a CLI that sees Iris healthy also sees a supervisor.
        self._guarded(self._hold_lock)
        self._thread = threading.Thread(target=self._run, name="iris-supervisor", daemon=True)
        self._thread.start()
        self._beat_thread = threading.Thread(
            target=self._beat_loop, name="iris-supervisor-heartbeat", daemon=True
        )
        self._beat_thread.start()

    def stop(self) -> None:
        """Stop the loop, then every child and every group still being stopped, all at once
        with one deadline (rows stay desired ``running``); the heartbeat goes last."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self._progress = time.monotonic()  # keep beating while the children stop
        children, self._children = self._children, {}
        stops, self._stops = self._stops, []
        groups = [_Group(n, c.pid, c.start_time, c.popen) for n, c in children.items()]
        groups += [stop.group for stop in stops]
        if groups:
            log.info("stopping supervised agents: %s", ", ".join(sorted({g.name for g in groups})))
        stop_groups(groups, SHUTDOWN_GRACE_SECONDS, SHUTDOWN_KILL_WAIT_SECONDS)
        for stop in stops:
            self._finish(stop)
        for name, child in children.items():
            self._report_stopped(name, child.revision)
        self._beat_stopping.set()
        if self._beat_thread is not None:
            self._beat_thread.join()
            self._beat_thread = None
        if self._lock_file is not None:
            self._guarded(lambda: self._store.clear_beat(self._pid))
            self._lock_file.close()
            self._lock_file = None
        self._store.close()

    def _report_stopped(self, name: str, revision: int) -> None:
        self._guarded(
            lambda: self._store.report(
                name, state="stopped", pid=None, pid_start_time=None, revision=revision
            )
        )

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._progress = time.monotonic()
            self._guarded(self.reconcile)
            self._stopping.wait(STOP_POLL_SECONDS if self._stops else self.poll_seconds)

    def _guarded(self, step: Callable[[], object]) -> None:
        """Run ``step``; log a failure (once until things work again) instead of dying."""
        try:
            step()
        except Exception as exc:  # the thread must outlive any one failure
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._last_problem:
                log.exception("supervisor: %s (retrying every %.1fs)", problem, self.poll_seconds)
                self._last_problem = problem
        else:
            self._last_problem = ""

    def reconcile(self) -> None:
        """One pass over the table: start, restart, stop and forget as the rows ask. Nothing
        in it waits for a process: stops are begun here and finished by later passes."""
        if not self._hold_lock():
            return
        self._advance_stops()
        rows = self._store.all()
        for row in rows:
            if self._stopping.is_set():
                return
            try:
                self._reconcile_row(row)
            except OSError as exc:  # no such program, no permission on its home...
                log.error("agent %s: could not start: %s", row.name, exc)
                self._fail(row, f"could not start: {exc}")
            except Exception as exc:  # one bad row must not stop the others
                log.exception("supervisor: agent %s failed", row.name)
                self._fail(row, f"supervisor error: {type(exc).__name__}: {exc}")
        wanted = {row.name for row in rows}
        gone = [name for name in self._children if name not in wanted]
        for name in gone:  # the row was deleted under us: nobody wants this child any more
            child = self._children.pop(name)
            log.info("agent %s: its row is gone; stopping pid %d", name, child.pid)
            self._begin_stop(_Group(name, child.pid, child.start_time, child.popen))

    def _hold_lock(self) -> bool:
        """Take the data dir's supervisor lock if we do not hold it yet (and beat at once)."""
        if self._lock_file is not None:
            return True
        run = self.data_dir / data_layout.RUN_DIR
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = (run / "supervisor.lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            if not self._standing_by:
                log.warning("another process supervises %s; standing by", self.data_dir)
                self._standing_by = True
            return False
        self._lock_file = handle
        self._standing_by = False
        self._store.beat(self._pid, self._pid_start)
        return True

    # -- the heartbeat -------------------------------------------------------------------------

    def _beat_loop(self) -> None:
        """Beat every ``HEARTBEAT_SECONDS`` with a connection of its own (a slow write of the
        loop's never delays it), while we hold the lock and the loop is not stuck."""
        store = SupervisedStore(self.data_dir)
        last_problem = ""
        try:
            while not self._beat_stopping.wait(HEARTBEAT_SECONDS):
                if self._lock_file is None:
                    continue
                if time.monotonic() - self._progress > STALL_SECONDS:
                    problem = "the supervisor loop is stuck; no heartbeat until it moves again"
                else:
                    try:
                        store.beat(self._pid, self._pid_start)
                    except Exception as exc:  # try again at the next beat
                        problem = f"heartbeat failed: {type(exc).__name__}: {exc}"
                    else:
                        problem = ""
                if problem and problem != last_problem:
                    log.error("supervisor: %s", problem)
                last_problem = problem
        finally:
            store.close()

    # -- stopping groups without waiting -------------------------------------------------------

    def _begin_stop(
        self, group: _Group, then: Callable[[], None] | None = None, *, kill: bool = False
    ) -> None:
        """SIGTERM (or SIGKILL) ``group`` now; later passes finish it (:meth:`_advance_stops`)
        and run ``then`` once it is gone."""
        if group.popen is None and not group_is_ours(group.pid, group.start_time):
            if then is not None:  # the pid names another process now: nothing of ours left
                then()
            return
        now = time.monotonic()
        if kill:
            signal_group(group.pid, signal.SIGKILL)
            stop = _Stop(group, now, now + LEFTOVER_GRACE_SECONDS, then)
        else:
            signal_group(group.pid, signal.SIGTERM)
            stop = _Stop(group, now + STOP_GRACE_SECONDS, None, then)
        self._stops.append(stop)

    def _advance_stops(self) -> None:
        now = time.monotonic()
        for stop in list(self._stops):
            group = stop.group
            if group.alive():
                if stop.give_up_at is None:
                    if now < stop.kill_at:
                        continue
                    log.warning(
                        "agent %s (pid %d) ignored SIGTERM; killing it", group.name, group.pid
                    )
                    signal_group(group.pid, signal.SIGKILL)
                    stop.give_up_at = now + LEFTOVER_GRACE_SECONDS
                    continue
                if now < stop.give_up_at:
                    continue
                log.error(
                    "agent %s: process group %d outlived SIGKILL for %.0fs; carrying on",
                    group.name,
                    group.pid,
                    LEFTOVER_GRACE_SECONDS,
                )
            self._stops.remove(stop)
            self._finish(stop)

    def _finish(self, stop: _Stop) -> None:
        if stop.then is not None:
            self._guarded(stop.then)

    def _being_stopped(self, name: str) -> bool:
        return any(stop.group.name == name for stop in self._stops)

    # -- one row -------------------------------------------------------------------------------

    def _reconcile_row(self, row: SupervisedProcess) -> None:
        if self._being_stopped(row.name):
            return  # its ports and its log are still held: anything else waits for the stop
        child = self._children.get(row.name)
        if row.desired == "absent":
            self._remove(row, child)
            return
        if row.problem:
            if row.state != "failed" or row.last_exit != row.problem:
                log.error("agent %s: %s", row.name, row.problem)
                self._store.report(
                    row.name, state="failed", pid=None, pid_start_time=None, last_exit=row.problem
                )
            return
        if child is not None:
            ended = child.exit_status()
            if ended is not None:
                self._children.pop(row.name)
                self._after_exit(row, child, ended)
                return
            if child.revision == row.revision:
                if not child.reported_running and (
                    time.monotonic() - child.started >= STARTED_AFTER_SECONDS
                ):
                    self._store.report(
                        row.name,
                        state="running",
                        pid=child.pid,
                        pid_start_time=child.start_time,
                        revision=row.revision,
                    )
                    child.reported_running = True
                if time.monotonic() >= child.next_log_check:
                    child.next_log_check = time.monotonic() + LOG_CHECK_SECONDS
                    if rotate_log(row.log_path):
                        note(row.log_path, f"log rotated (previous part in {row.log_path}.1)")
                return
            log.info("agent %s: installed again; restarting it", row.name)
            self._children.pop(row.name)
            self._backoff.pop(row.name, None)
            # Started again once the old group is gone (a later pass).
            self._begin_stop(_Group(row.name, child.pid, child.start_time, child.popen))
            return
        if row.pid is not None and (self._adopt_orphan(row) or self._stop_orphan(row)):
            return
        backoff = self._backoff.get(row.name)
        if backoff is not None and time.monotonic() < backoff.not_before:
            return
        self._start(row, after_crash=backoff is not None and backoff.failures > 0)

    def _remove(self, row: SupervisedProcess, child: _Child | None) -> None:
        """Stop the row's group, then delete the row (unless it was installed again)."""

        def forget() -> None:
            self._backoff.pop(row.name, None)
            if self._store.delete(row.name):
                note(row.log_path, "stopped and removed")

        if child is not None:
            log.info("agent %s: removing; stopping pid %d", row.name, child.pid)
            self._children.pop(row.name)
            self._begin_stop(_Group(row.name, child.pid, child.start_time, child.popen), forget)
        elif row.pid is not None and _Group(row.name, row.pid, row.pid_start_time).alive():
            log.info("agent %s: removing; stopping pid %d", row.name, row.pid)
            self._begin_stop(_Group(row.name, row.pid, row.pid_start_time), forget)
        else:
            forget()

    def _adopt_orphan(self, row: SupervisedProcess) -> bool:
        """A previous Iris's child, reported running for this wish and still alive with its
        recorded start time: watched from now on instead of replaced, so nothing it was doing
        (a delegated run, its reply) is cut short."""
        assert row.pid is not None
        if row.state != "running" or not process_alive(row.pid, row.pid_start_time):
            return False
        if not _runs(row.pid, row.command, row.cwd):
            return False  # the pid and start time match by chance (after a reboot, say)
        log.warning(
            "agent %s: pid %d was left running by an Iris that did not stop it; watching it",
            row.name,
            row.pid,
        )
        rotate_log(row.log_path)  # nobody bounded it while no Iris ran
        note(row.log_path, f"adopted pid {row.pid}, left running by a previous Iris")
        self._children[row.name] = _Child(
            row.pid, None, row.revision, row.pid_start_time, time.monotonic(), True
        )
        return True

    def _stop_orphan(self, row: SupervisedProcess) -> bool:
        """A pid in the row but no child of ours that :meth:`_adopt_orphan` would not take: a
        previous Iris's child never reported running for this wish, or a group whose leader is
        gone. Stop what is left of it; the row's pid is cleared once its group is gone. True
        while that is under way."""
        assert row.pid is not None
        group = _Group(row.name, row.pid, row.pid_start_time)

        def clear() -> None:
            self._store.report(row.name, state=row.state, pid=None, pid_start_time=None)

        if process_alive(row.pid, row.pid_start_time):
            log.warning(
                "agent %s: pid %d was left running by an Iris that did not stop it; "
                "stopping it before starting a fresh one",
                row.name,
                row.pid,
            )
            note(row.log_path, f"stopping pid {row.pid} left running by a previous Iris")
            self._begin_stop(group, clear)
        elif group.alive():
            # The leader is gone but part of its group lives on (a gunicorn worker).
            self._begin_stop(group, clear)
        else:
            clear()
        return self._being_stopped(row.name)

    def _start(self, row: SupervisedProcess, *, after_crash: bool) -> None:
        fd = open_log(row.log_path)
        try:
            restarts = row.restarts + 1 if after_crash else row.restarts
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            what = f"restart {restarts}" if after_crash else "start"
            os.write(fd, f"{stamp} [supervisor] {what}: {' '.join(row.command)}\n".encode())
            popen = subprocess.Popen(  # argv from the launch, no shell
                row.command,
                env=child_environment(self._base, row.environment),
                cwd=row.cwd,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(fd)
        start_time = process_start_time(popen.pid)
        child = _Child(popen.pid, popen, row.revision, start_time, time.monotonic())
        self._children[row.name] = child
        log.info("agent %s: started pid %d (%s)", row.name, popen.pid, what)
        self._store.report(
            row.name,
            state="starting",
            pid=popen.pid,
            pid_start_time=child.start_time,
            restarts=restarts,
            revision=row.revision,
        )

    def _after_exit(self, row: SupervisedProcess, child: _Child, exit_text: str) -> None:
        ran = time.monotonic() - child.started
        # A gunicorn master killed on its own leaves its worker holding the ports: clear the
        # whole group; the next start waits until it is gone.
        leftover = _Group(row.name, child.pid, child.start_time, child.popen)
        if leftover.alive():
            self._begin_stop(leftover, kill=True)
        delay = self._schedule_restart(row.name, ran)
        log.warning(
            "agent %s: pid %d %s after %.1fs; restarting in %.1fs",
            row.name,
            child.pid,
            exit_text,
            ran,
            delay,
        )
        note(row.log_path, f"pid {child.pid} {exit_text}; restarting in {delay:.1f}s")
        self._store.report(
            row.name,
            state="backoff",
            pid=None,
            pid_start_time=None,
            last_exit=exit_text,
            revision=row.revision,
        )

    def _schedule_restart(self, name: str, ran: float) -> float:
        backoff = self._backoff.setdefault(name, _Backoff())
        if ran >= BACKOFF_RESET_AFTER_SECONDS:
            backoff.failures = 0
        delay = min(self.backoff_seconds * (2.0**backoff.failures), BACKOFF_CAP_SECONDS)
        backoff.failures += 1
        backoff.not_before = time.monotonic() + delay
        return delay

    def _fail(self, row: SupervisedProcess, reason: str) -> None:
        """A row we could not act on: failed (with the reason), tried again after a backoff."""
        child = self._children.pop(row.name, None)
        if child is not None:
            self._begin_stop(_Group(row.name, child.pid, child.start_time, child.popen))
        self._schedule_restart(row.name, 0.0)
        note(row.log_path, reason)
        self._guarded(
            lambda: self._store.report(
                row.name, state="failed", pid=None, pid_start_time=None, last_exit=reason
            )
        )

"""The process supervisor: Iris keeps its sub-agents running where systemd is not PID 1.

It runs inside ``iris serve`` (in the gunicorn worker, started and stopped with the
:class:`~iris_runtime.runtime.Runtime`), as one thread that every ``poll_seconds`` reconciles
the ``supervised_processes`` table (:mod:`.supervised`) with its children:

- a row desired ``running`` without a live child gets one; a child that exits is restarted after
  a backoff (1 s, 2 s, 4 s ... at most 30 s; back to 1 s once a child has run for 60 s), and what
  is left of its process group (a gunicorn worker whose master died) is killed first, so the
  agent's ports are free again;
- a row desired ``absent`` has its process group stopped, then the row is deleted.

Stopping a process group never blocks the loop (:class:`~.process_groups.PendingStops`): the
group gets SIGTERM, and later passes (every 0.1 s while any stop is pending) send SIGKILL once
``STOP_GRACE_SECONDS`` have passed and finish the work (delete the row, start the replacement)
once the group is gone. So an agent that ignores SIGTERM delays only its own row, never the
others.

How a child starts and what it inherits is :mod:`.supervised_child`; a second thread writes the
heartbeat, and a lock keeps to one supervisor per data dir (:mod:`.supervisor_heartbeat`); each
agent's output and the supervisor's lines about it go to the agent's log (:mod:`.agent_log`).

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

``IRIS_SUPERVISOR_BACKOFF_MS`` (default 1000) sets the first restart delay (tests use a short
one); the cap stays 30 s.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from iris_runtime.config import Settings
from iris_runtime.provision.agent_log import (
    LOG_CHECK_SECONDS,
    LOG_ROTATE_BYTES,
    note,
    open_log,
    rotate_log,
)
from iris_runtime.provision.process_groups import (
    LEFTOVER_GRACE_SECONDS,
    STOP_GRACE_SECONDS,
    PendingStops,
    ProcessGroup,
    group_alive,
    group_is_ours,
    signal_group,
    stop_groups,
    stop_recorded,
)
from iris_runtime.provision.supervised import (
    SupervisedProcess,
    SupervisedStore,
    process_alive,
    process_start_time,
)
from iris_runtime.provision.supervised_child import (
    BACKOFF_CAP_SECONDS,
    BASE_VARIABLES,
    RestartBackoff,
    SupervisedChild,
    backoff_from,
    child_environment,
    describe_exit,
    runs_command,
    start_child,
)
from iris_runtime.provision.supervisor_heartbeat import (
    HEARTBEAT_SECONDS,
    STALL_SECONDS,
    SupervisorHeartbeat,
)

# Names that lived here before the supervisor's parts got modules of their own.
__all__ = [
    "BACKOFF_CAP_SECONDS",
    "BASE_VARIABLES",
    "HEARTBEAT_SECONDS",
    "LEFTOVER_GRACE_SECONDS",
    "LOG_CHECK_SECONDS",
    "LOG_ROTATE_BYTES",
    "STALL_SECONDS",
    "STOP_GRACE_SECONDS",
    "Supervisor",
    "backoff_from",
    "child_environment",
    "describe_exit",
    "group_alive",
    "group_is_ours",
    "note",
    "open_log",
    "rotate_log",
    "signal_group",
    "stop_groups",
    "stop_recorded",
]

log = logging.getLogger(__name__)

STARTED_AFTER_SECONDS = 1.0  # alive this long after exec: reported ``running``
# Iris stopping: one deadline for all children, SIGTERM → SIGKILL, then the wait for the killed.
# Their sum (7 s) plus the in-progress pass (short: nothing in it waits on a child) stays well
# inside gunicorn's graceful_timeout of 15 s, which also covers draining requests first.
SHUTDOWN_GRACE_SECONDS = 5.0
SHUTDOWN_KILL_WAIT_SECONDS = 2.0
STOP_POLL_SECONDS = 0.1  # the loop's period while some group is being stopped


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
        self._children: dict[str, SupervisedChild] = {}
        self._backoff: dict[str, RestartBackoff] = {}
        self._stops = PendingStops()  # owned by the loop's thread
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat = SupervisorHeartbeat(data_dir, self._store)
        self._last_problem = ""

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
        pid = os.getpid()
        self._stopping.clear()
        self._heartbeat.start(pid, process_start_time(pid) or 0)
        # Beat once before returning, so a CLI that sees Iris healthy also sees a supervisor.
        self._guarded(self._heartbeat.hold)
        self._thread = threading.Thread(target=self._run, name="iris-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, then every child and every group still being stopped, all at once
        with one deadline (rows stay desired ``running``); the heartbeat goes last."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self._heartbeat.passed()  # keep beating while the children stop
        children, self._children = self._children, {}
        stops = self._stops.take_all()
        groups = [child.group(name) for name, child in children.items()]
        groups += [stop.group for stop in stops]
        if groups:
            log.info("stopping supervised agents: %s", ", ".join(sorted({g.name for g in groups})))
        stop_groups(groups, SHUTDOWN_GRACE_SECONDS, SHUTDOWN_KILL_WAIT_SECONDS)
        for stop in stops:
            if stop.then is not None:
                self._guarded(stop.then)
        for name, child in children.items():
            self._report_stopped(name, child.revision)
        self._heartbeat.stop()
        self._guarded(self._heartbeat.release)
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
            self._heartbeat.passed()
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
        if not self._heartbeat.hold():
            return
        for then in self._stops.advance():
            self._guarded(then)
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
            self._stops.begin(child.group(name))

    # -- one row -------------------------------------------------------------------------------

    def _reconcile_row(self, row: SupervisedProcess) -> None:
        if self._stops.being_stopped(row.name):
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
            self._stops.begin(child.group(row.name))
            return
        if row.pid is not None and (self._adopt_orphan(row) or self._stop_orphan(row)):
            return
        backoff = self._backoff.get(row.name)
        if backoff is not None and time.monotonic() < backoff.not_before:
            return
        self._start(row, after_crash=backoff is not None and backoff.failures > 0)

    def _remove(self, row: SupervisedProcess, child: SupervisedChild | None) -> None:
        """Stop the row's group, then delete the row (unless it was installed again)."""

        def forget() -> None:
            self._backoff.pop(row.name, None)
            if self._store.delete(row.name):
                note(row.log_path, "stopped and removed")

        if child is not None:
            log.info("agent %s: removing; stopping pid %d", row.name, child.pid)
            self._children.pop(row.name)
            self._stops.begin(child.group(row.name), forget)
        elif row.pid is not None and ProcessGroup(row.name, row.pid, row.pid_start_time).alive():
            log.info("agent %s: removing; stopping pid %d", row.name, row.pid)
            self._stops.begin(ProcessGroup(row.name, row.pid, row.pid_start_time), forget)
        else:
            forget()

    def _adopt_orphan(self, row: SupervisedProcess) -> bool:
        """A previous Iris's child, reported running for this wish and still alive with its
        recorded start time: watched from now on instead of replaced, so nothing it was doing
        (a delegated run, its reply) is cut short."""
        assert row.pid is not None
        if row.state != "running" or not process_alive(row.pid, row.pid_start_time):
            return False
        if not runs_command(row.pid, row.command, row.cwd):
            return False  # the pid and start time match by chance (after a reboot, say)
        rotate_log(row.log_path)  # nobody bounded it while no Iris ran
        note(row.log_path, f"adopted pid {row.pid}, left running by a previous Iris")
        self._children[row.name] = SupervisedChild(
            row.pid, None, row.revision, row.pid_start_time, time.monotonic(), True
        )
        log.warning(
            "agent %s: pid %d was left running by an Iris that did not stop it; watching it",
            row.name,
            row.pid,
        )
        return True

    def _stop_orphan(self, row: SupervisedProcess) -> bool:
        """A pid in the row but no child of ours that :meth:`_adopt_orphan` would not take: a
        previous Iris's child never reported running for this wish, or a group whose leader is
        gone. Stop what is left of it; the row's pid is cleared once its group is gone. True
        while that is under way."""
        assert row.pid is not None
        group = ProcessGroup(row.name, row.pid, row.pid_start_time)

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
            self._stops.begin(group, clear)
        elif group.alive():
            # The leader is gone but part of its group lives on (a gunicorn worker).
            self._stops.begin(group, clear)
        else:
            clear()
        return self._stops.being_stopped(row.name)

    def _start(self, row: SupervisedProcess, *, after_crash: bool) -> None:
        restarts = row.restarts + 1 if after_crash else row.restarts
        what = f"restart {restarts}" if after_crash else "start"
        child = start_child(row, self._base, what)
        self._children[row.name] = child
        log.info("agent %s: started pid %d (%s)", row.name, child.pid, what)
        self._store.report(
            row.name,
            state="starting",
            pid=child.pid,
            pid_start_time=child.start_time,
            restarts=restarts,
            revision=row.revision,
        )

    def _after_exit(self, row: SupervisedProcess, child: SupervisedChild, exit_text: str) -> None:
        ran = time.monotonic() - child.started
        # A gunicorn master killed on its own leaves its worker holding the ports: clear the
        # whole group; the next start waits until it is gone.
        leftover = child.group(row.name)
        if leftover.alive():
            self._stops.begin(leftover, kill=True)
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
        return self._backoff.setdefault(name, RestartBackoff()).schedule(self.backoff_seconds, ran)

    def _fail(self, row: SupervisedProcess, reason: str) -> None:
        """A row we could not act on: failed (with the reason), tried again after a backoff."""
        child = self._children.pop(row.name, None)
        if child is not None:
            self._stops.begin(child.group(row.name))
        self._schedule_restart(row.name, 0.0)
        note(row.log_path, reason)
        self._guarded(
            lambda: self._store.report(
                row.name, state="failed", pid=None, pid_start_time=None, last_exit=reason
            )
        )

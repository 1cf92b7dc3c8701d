"""Process mode: the :class:`~iris_runtime.provision.launch.AgentService` for hosts without
systemd, where the running Iris supervises its agents as child processes.

The CLI (``iris agents spawn|remove``) never starts an agent itself: a child of a short-lived
command would die or be orphaned with it. It writes the wish into ``state.db``
(:mod:`.supervised`) and waits for the supervisor inside ``iris serve`` (:mod:`.supervisor`) to
report the outcome. So process mode needs a running Iris; without one, ``install`` refuses with
that reason, and ``remove`` stops the recorded process itself (after checking, by its start
time, that the pid still names the process that was started). While a supervisor beats,
``remove`` only waits: it never signals a process the supervisor is stopping.
"""

from __future__ import annotations

import time
from pathlib import Path

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.agent_log import agent_log_path, log_tail
from iris_runtime.provision.launch import AgentLaunch, Progress
from iris_runtime.provision.process_groups import (
    LEFTOVER_GRACE_SECONDS,
    STOP_GRACE_SECONDS,
    stop_recorded,
)
from iris_runtime.provision.supervised import SupervisedProcess, SupervisedStore, SupervisorBeat

NO_SUPERVISOR = (
    "process mode needs a running Iris to supervise the agent: start `iris serve` "
    "(or use --service-manager systemd)"
)


class ProcessService:
    """Agents as children of the running Iris. ``kind`` is ``"process"``."""

    kind = "process"

    def __init__(self, data_dir: Path, wait_seconds: float = 30.0) -> None:
        self.data_dir = data_dir  # the supervising Iris's IRIS_DATA_DIR (holds state.db)
        self.wait_seconds = wait_seconds
        self._poll = 0.1

    def supervisor_alive(self) -> bool:
        """Whether an Iris is supervising this data dir now (a fresh heartbeat from a live
        process)."""
        with SupervisedStore(self.data_dir) as store:
            return store.supervisor_alive()

    def processes(self) -> list[SupervisedProcess]:
        """Every supervised agent with what the supervisor last reported (for listings)."""
        with SupervisedStore(self.data_dir) as store:
            return store.all()

    def status(self, name: str) -> SupervisedProcess | None:
        with SupervisedStore(self.data_dir) as store:
            return store.get(name)

    def exists(self, name: str) -> bool:
        return self.status(name) is not None

    def install(self, launch: AgentLaunch, progress: Progress) -> None:
        with SupervisedStore(self.data_dir) as store:
            beat = _live_supervisor(store)
            log_path = agent_log_path(launch.home)
            progress(f"asking Iris (pid {beat.pid}) to run {launch.name} (log: {log_path})")
            row = store.request(
                launch.name, launch.command, launch.environment, launch.home, log_path
            )
            try:
                self._wait_running(store, row, progress)
            except BaseException:
                self.remove(launch.name, progress)
                raise

    def start(self, name: str, progress: Progress) -> None:
        """Ask the supervisor to run ``name`` again with the wish it has (a new revision, so
        the wait below sees only what happens from now on). Unlike ``install``, a failure
        leaves the row as it was: it is an existing agent, not one being created."""
        with SupervisedStore(self.data_dir) as store:
            beat = _live_supervisor(store)
            row = store.get(name)
            if row is None or row.desired != "running":
                raise ProvisionError(f"agent {name} is not supervised: nothing to start")
            progress(f"asking Iris (pid {beat.pid}) to start {name} again")
            wished = store.request(name, row.command, row.environment, row.cwd, row.log_path)
            self._wait_running(store, wished, progress)

    def _wait_running(
        self, store: SupervisedStore, wished: SupervisedProcess, progress: Progress
    ) -> None:
        name = wished.name
        deadline = time.monotonic() + self.wait_seconds
        shown_pid: int | None = None
        while True:
            row = store.get(name)
            if row is None or row.revision != wished.revision or row.desired != "running":
                raise ProvisionError(f"agent {name} was removed or reinstalled meanwhile")
            if row.last_exit is not None or row.state == "failed":
                raise ProvisionError(
                    f"agent {name} did not start ({row.last_exit or row.state}); "
                    f"last lines of {row.log_path}:\n{log_tail(row.log_path)}"
                )
            if row.pid is not None and row.pid != shown_pid:
                progress(f"{name} started (pid {row.pid})")
                shown_pid = row.pid
            if row.state == "running" and row.pid is not None:
                progress(f"{name} running under Iris's supervision (pid {row.pid})")
                return
            if not store.supervisor_alive():
                raise ProvisionError(f"Iris stopped before it started {name}: {NO_SUPERVISOR}")
            if time.monotonic() >= deadline:
                raise ProvisionError(
                    f"agent {name} not running after {self.wait_seconds:.0f}s "
                    f"(state {row.state}); last lines of {row.log_path}:\n"
                    f"{log_tail(row.log_path)}"
                )
            time.sleep(self._poll)

    def remove(self, name: str, progress: Progress) -> bool:
        """Mark ``name`` absent and wait for the supervisor to stop it and delete its row. Only
        when no supervisor beats (none ever did, or it stopped or died meanwhile) is the
        recorded process stopped here: a live supervisor is never raced."""
        with SupervisedStore(self.data_dir) as store:
            if not store.set_desired(name, "absent"):
                return False
            asked = False
            while store.supervisor_alive():
                if not asked:
                    progress(f"asking Iris to stop {name}")
                    asked = True
                if self._wait_deleted(store, name):
                    progress(f"{name} stopped and no longer supervised")
                    return True
            # Nobody supervises (or the supervisor went away meanwhile): do it here.
            row = store.get(name)
            if row is not None:
                if row.pid is not None:
                    progress(f"stopping {name} (pid {row.pid}) directly: no Iris supervises it")
                    stop_recorded(name, row.pid, row.pid_start_time)
                store.delete(name)
            progress(f"{name} stopped and no longer supervised")
            return True

    def _wait_deleted(self, store: SupervisedStore, name: str) -> bool:
        """True once the supervisor deleted the row; False when it stopped beating first."""
        # Stopping takes up to the supervisor's SIGTERM grace plus its SIGKILL wait.
        wait = max(self.wait_seconds, STOP_GRACE_SECONDS + LEFTOVER_GRACE_SECONDS + 5.0)
        deadline = time.monotonic() + wait
        while store.get(name) is not None:
            if not store.supervisor_alive():
                return False
            if time.monotonic() >= deadline:
                raise ProvisionError(
                    f"Iris did not stop agent {name} within {wait:.0f}s; try again"
                )
            time.sleep(self._poll)
        return True


def _live_supervisor(store: SupervisedStore) -> SupervisorBeat:
    """The heartbeat of the Iris supervising this data dir; ProvisionError when none beats."""
    beat = store.supervisor()
    if beat is None or not beat.is_alive():
        raise ProvisionError(NO_SUPERVISOR)
    return beat

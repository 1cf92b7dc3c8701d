"""Supervised agents' process groups, and stopping them.

Every supervised child starts as a session leader, so its pid is also its process group id: a
gunicorn master and its workers are stopped together. A group is signalled only while its pid
can still name nothing but ours (:func:`group_is_ours`), because the kernel recycles pids.

Two ways to stop: :func:`stop_groups` waits (Iris stopping, a CLI when no Iris runs);
:class:`PendingStops` does not (the supervisor's loop, where an agent that ignores SIGTERM must
delay only its own row).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.provision.supervised import process_start_time

# The supervisor's lines keep one logger name, whichever of its modules writes them.
log = logging.getLogger("iris_runtime.provision.supervisor")

STOP_GRACE_SECONDS = 10.0  # a removed or replaced agent: SIGTERM → SIGKILL
LEFTOVER_GRACE_SECONDS = 5.0  # how long to wait for a killed group to vanish


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


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@dataclass
class ProcessGroup:
    """A process group to stop: our child (``popen``) or an orphan of an earlier Iris."""

    name: str
    pid: int
    start_time: int | None
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None and self.popen.poll() is None:
            return True
        return group_is_ours(self.pid, self.start_time) and group_alive(self.pid)


def stop_groups(
    groups: list[ProcessGroup],
    grace: float = STOP_GRACE_SECONDS,
    kill_wait: float = LEFTOVER_GRACE_SECONDS,
) -> None:
    """SIGTERM every group at once, wait up to ``grace`` for all of them (one deadline),
    SIGKILL what is left and wait up to ``kill_wait`` for it to vanish."""
    groups = [g for g in groups if group_is_ours(g.pid, g.start_time) or g.popen is not None]
    for group in groups:
        signal_group(group.pid, signal.SIGTERM)
    _wait_gone(groups, grace)
    for group in groups:
        if group.alive():
            log.warning("agent %s (pid %d) ignored SIGTERM; killing it", group.name, group.pid)
            signal_group(group.pid, signal.SIGKILL)
    _wait_gone(groups, kill_wait)


def _wait_gone(groups: list[ProcessGroup], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(g.alive() for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_recorded(name: str, pid: int, start_time: int | None) -> None:
    """Stop the process group a row recorded, from any process (the CLI when no Iris runs):
    only when ``pid`` still names the process started then, or nothing at all."""
    stop_groups([ProcessGroup(name, pid, start_time)])


@dataclass
class PendingStop:
    """A process group being stopped without waiting for it: SIGTERM was sent (or SIGKILL,
    when ``give_up_at`` is set); ``then`` runs once the group is gone."""

    group: ProcessGroup
    kill_at: float  # monotonic: SIGKILL from then on
    give_up_at: float | None = None  # monotonic, once SIGKILLed: stop waiting then
    then: Callable[[], None] | None = None


class PendingStops:
    """The groups one thread (the supervisor's loop) is stopping: begun here, moved on by each
    of its passes, so none of them waits for a process."""

    def __init__(self) -> None:
        self._stops: list[PendingStop] = []

    def __bool__(self) -> bool:
        return bool(self._stops)

    def begin(
        self, group: ProcessGroup, then: Callable[[], None] | None = None, *, kill: bool = False
    ) -> None:
        """SIGTERM (or SIGKILL) ``group`` now; :meth:`advance` finishes it and hands back
        ``then`` once it is gone."""
        if group.popen is None and not group_is_ours(group.pid, group.start_time):
            if then is not None:  # the pid names another process now: nothing of ours left
                then()
            return
        now = time.monotonic()
        if kill:
            signal_group(group.pid, signal.SIGKILL)
            stop = PendingStop(group, now, now + LEFTOVER_GRACE_SECONDS, then)
        else:
            signal_group(group.pid, signal.SIGTERM)
            stop = PendingStop(group, now + STOP_GRACE_SECONDS, None, then)
        self._stops.append(stop)

    def advance(self) -> list[Callable[[], None]]:
        """SIGKILL the groups past their grace, let go of those gone (or that outlived SIGKILL
        too long) and return the ``then`` of each one let go, for the caller to run."""
        now = time.monotonic()
        finished: list[Callable[[], None]] = []
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
            if stop.then is not None:
                finished.append(stop.then)
        return finished

    def being_stopped(self, name: str) -> bool:
        return any(stop.group.name == name for stop in self._stops)

    def take_all(self) -> list[PendingStop]:
        """Every stop under way, handed over (Iris stopping finishes them at once)."""
        stops, self._stops = self._stops, []
        return stops

"""One child of the supervisor: how it starts, what it inherits, how it ended, when it restarts.

A child gets a session (and so a process group) of its own, only a minimal environment plus
its row's literal values (never Iris's own: it holds Iris's API token, its LLM keys and the chat
platforms' tokens), no inherited file descriptors (Iris's listening sockets), stdin from
``/dev/null`` and stdout/stderr appended to the agent's log file (mode 0600).

A child that exits is restarted after a backoff: ``IRIS_SUPERVISOR_BACKOFF_MS`` (default 1000),
doubled at each crash up to ``BACKOFF_CAP_SECONDS``, and back to the first delay once a child
has run for ``BACKOFF_RESET_AFTER_SECONDS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.errors import ConfigError
from iris_runtime.provision.agent_log import open_log, supervisor_line
from iris_runtime.provision.process_groups import ProcessGroup
from iris_runtime.provision.supervised import (
    SupervisedProcess,
    process_alive,
    process_start_time,
)

BACKOFF_CAP_SECONDS = 30.0
BACKOFF_RESET_AFTER_SECONDS = 60.0  # a child that ran this long crashed "for the first time"
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


def runs_command(pid: int, command: tuple[str, ...], cwd: Path) -> bool:
    """Whether ``pid`` runs ``command`` in ``cwd`` (a program that rewrites its own title does
    not match, and is then replaced rather than adopted)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        where = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    return tuple(os.fsdecode(arg) for arg in argv) == command and where == cwd.resolve()


@dataclass
class SupervisedChild:
    """A process the supervisor watches for one row's wish (``revision``)."""

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

    def group(self, name: str) -> ProcessGroup:
        return ProcessGroup(name, self.pid, self.start_time, self.popen)


def start_child(
    row: SupervisedProcess, base_environment: Mapping[str, str], what: str
) -> SupervisedChild:
    """Start the row's command in a session of its own, appending its output to its log after
    a supervisor line saying ``what`` (start, restart N) and which command."""
    fd = open_log(row.log_path)
    try:
        os.write(fd, supervisor_line(f"{what}: {' '.join(row.command)}"))
        popen = subprocess.Popen(  # argv from the launch, no shell
            row.command,
            env=child_environment(base_environment, row.environment),
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
    return SupervisedChild(popen.pid, popen, row.revision, start_time, time.monotonic())


@dataclass
class RestartBackoff:
    """When a crashed child may start again."""

    failures: int = 0
    not_before: float = 0.0  # monotonic

    def schedule(self, first_delay: float, ran: float) -> float:
        """The delay after a child that ran ``ran`` seconds, noted in ``not_before``."""
        if ran >= BACKOFF_RESET_AFTER_SECONDS:
            self.failures = 0
        delay = min(first_delay * (2.0**self.failures), BACKOFF_CAP_SECONDS)
        self.failures += 1
        self.not_before = time.monotonic() + delay
        return delay

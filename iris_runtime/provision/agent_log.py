"""A supervised agent's log: ``<home>/logs/agent.log``, mode 0600, bounded by rotation.

The agent's stdout and stderr are appended to it, and the supervisor's own lines (start, exit,
restart) stand among them. Past ``LOG_ROTATE_BYTES`` it moves to ``agent.log.1`` at the next
start, or is copied there and truncated while the agent runs (the supervisor looks every
``LOG_CHECK_SECONDS``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

LOG_ROTATE_BYTES = 10 * 1024 * 1024
LOG_CHECK_SECONDS = 30.0  # how often a running child's log size is looked at
LOG_TAIL_LINES = 20


def agent_log_path(home: Path) -> Path:
    """Where a supervised agent's stdout and stderr go (inside its home, mode 0600)."""
    return home / "logs" / "agent.log"


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


def supervisor_line(line: str) -> bytes:
    """One line of the supervisor's in an agent's log, stamped with the local time."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"{stamp} [supervisor] {line}\n".encode()


def note(path: Path, line: str) -> None:
    """Append one supervisor line to an agent's log (what happened to it, next to its output)."""
    try:
        fd = open_log(path, rotate=False)  # the agent may be running and writing to it
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.write(fd, supervisor_line(line))
    os.close(fd)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` of an agent's log (read from its last 16 KiB), for error messages."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 16 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])

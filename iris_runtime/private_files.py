"""Files that hold secrets: created 0600 in 0700 folders, replaced atomically, locked by flock.

``agents.json``, the secret store and the audit log all follow these rules, so they share this
one implementation.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets as _random
from collections.abc import Iterator
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def write_private_file(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, mode 0600, durable across a crash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (created 0600, never deleted)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a loose mode left by hand or an old version is tightened
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path

"""Files that hold secrets: created 0600 in 0700 folders, replaced atomically, locked by flock.

``agents.json``, the secret store and the audit log all follow these rules, so they share this
one implementation.

Ownership: a command run as root (an operator's ``sudo iris agents ...``, a deployment running
``iris agents ensure``) writes into a data dir that belongs to Iris's service user. A file or
folder it creates there is given the owner of the folder it is created in, and a file it
replaces keeps the owner of the file it replaces; otherwise the next write by the service (a
0600 file owned by root) fails. Only what this process creates is handed over: an existing file
is never re-owned. Unprivileged processes cannot give files away and are not affected.
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

Owner = tuple[int, int]


def _root() -> bool:
    return os.geteuid() == 0


def parent_owner(path: Path) -> Owner | None:
    """The owner a new ``path`` should get: its folder's, when running as root and that is not
    root itself (None: nothing to hand over)."""
    if not _root():
        return None
    st = os.stat(path.parent)
    owner = (st.st_uid, st.st_gid)
    return None if owner == (0, 0) else owner


def adopt_parent_owner(path: Path) -> None:
    """Give ``path``, just created by this process, its folder's owner (root only)."""
    owner = parent_owner(path)
    if owner is not None:
        os.lchown(path, *owner)


def adopt_parent_owner_tree(path: Path) -> None:
    """:func:`adopt_parent_owner` for ``path`` and everything under it (a copied folder)."""
    owner = parent_owner(path)
    if owner is None:
        return
    os.lchown(path, *owner)
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):
            for entry in (*dirs, *files):
                os.lchown(os.path.join(folder, entry), *owner)


def open_private(path: Path, flags: int = os.O_RDWR) -> int:
    """Open ``path`` (created 0600 when missing) with ``flags``; a file created here gets its
    folder's owner (see the module docstring), an existing one keeps its own."""
    flags |= os.O_CLOEXEC
    while True:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            try:
                return os.open(path, flags)
            except FileNotFoundError:
                continue  # deleted between the two opens: create it after all
        try:
            owner = parent_owner(path)
            if owner is not None:
                os.fchown(fd, *owner)
        except BaseException:
            os.close(fd)
            raise
        return fd


def write_private_file(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, mode 0600, durable across a crash."""
    owner: Owner | None = None
    if _root():
        try:
            st = os.lstat(path)
            owner = (st.st_uid, st.st_gid)  # a replaced file keeps its owner
        except FileNotFoundError:
            owner = parent_owner(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            if owner is not None and owner != (0, 0):
                os.fchown(fd, *owner)
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
    fd = open_private(path)
    try:
        os.fchmod(fd, FILE_MODE)  # a loose mode left by hand or an old version is tightened
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def private_dir(path: Path) -> Path:
    """``path`` and any missing parents, 0700; the folders created here get the owner of the
    folder they are created in."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            # Missing parents get the default mode, as mkdir(parents=True) gives them.
            folder.mkdir(mode=DIR_MODE if folder == path else 0o777)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs
        adopt_parent_owner(folder)
    path.mkdir(exist_ok=True)  # raises when path is a file
    os.chmod(path, DIR_MODE)
    return path

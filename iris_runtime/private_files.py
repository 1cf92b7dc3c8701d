"""Files that hold secrets: created 0600 in 0700 folders, replaced atomically, locked by flock.

``agents.json``, the secret store and the audit log all follow these rules, so they share this
one implementation.

Ownership: a command run as root (an operator's ``sudo iris agents ...``, a deployment running
``iris agents ensure``) writes into a data dir that belongs to Iris's service user. A file or
folder it creates there is given the owner of the folder it is created in, and a file it
replaces keeps the owner of the file it replaces; otherwise the next write by the service (a
0600 file owned by root) fails. Only what this process creates is handed over: an existing file
is never re-owned. Unprivileged processes cannot give files away and are not affected.

Symlinks: the service user can write in that data dir, so it could plant a symlink (or a hard
link, a FIFO) where a root-run command expects one of its files, to make root chmod, chown or
append to a file of its choice. So a private file is always opened with ``O_NOFOLLOW`` and
changed through its descriptor only, and a root-run command refuses (:class:`UnsafeFile`) a
file that is not a plain, singly linked regular file owned by root or by its folder's owner.
A private folder that is a symlink is refused unless root or this user made the link (an
operator's symlinked data dir or agents dir is fine). Atomic replacement renames over the
name, so it replaces a planted link rather than writing through it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets as _random
import stat
from collections.abc import Iterator
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.errors import ConfigError

DIR_MODE = 0o700
FILE_MODE = 0o600

Owner = tuple[int, int]

# SQLite's own files next to a database: root must not follow a link planted at any of them.
SQLITE_SIDECARS = data_layout.SQLITE_SIDECARS


class UnsafeFile(ConfigError):
    """A private file or folder Iris refuses to touch: a symlink, or (when running as root)
    something other than a regular file owned by root or by the owner of its folder."""

    code = "unsafe_file"


def _root() -> bool:
    return os.geteuid() == 0


def _refuse_symlink(path: Path, exc: OSError) -> None:
    """Turn the ``ELOOP`` an ``O_NOFOLLOW`` open gives for a symlink into :class:`UnsafeFile`."""
    if exc.errno == errno.ELOOP:
        raise UnsafeFile(
            f"{path} is a symbolic link; refusing to follow it (a private file must be a "
            "regular file: remove the link)"
        ) from None


def _check_owned(path: Path, st: os.stat_result) -> None:
    """When running as root, refuse ``path`` (described by ``st``, from fstat or lstat) unless it
    is a regular file with one link, owned by root or by its folder's owner. Unprivileged
    processes can only harm what they can write anyway."""
    if not _root():
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFile(f"{path} is a symbolic link; refusing to follow it as root")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(f"{path} is not a regular file; refusing to use it as root")
    elif st.st_nlink != 1:
        raise UnsafeFile(f"{path} has {st.st_nlink} hard links; refusing to use it as root")
    folder_uid = os.stat(path.parent).st_uid
    if st.st_uid not in (0, folder_uid):
        raise UnsafeFile(
            f"{path} belongs to uid {st.st_uid}, neither root nor the owner of its folder "
            f"(uid {folder_uid}); refusing to use it as root"
        )


def _open_nofollow(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` that never follows a symlink at ``path`` nor blocks on a FIFO there."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        _refuse_symlink(path, exc)
        raise
    if not flags & os.O_NONBLOCK:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
    return fd


def check_private_path(path: Path, *, sqlite: bool = False) -> None:
    """Before handing ``path`` to something that follows symlinks (SQLite): when running as
    root, refuse it (and with ``sqlite`` its ``-wal``/``-shm``/``-journal`` files) if it exists
    and is not a regular file owned by root or its folder's owner. Missing files are fine."""
    if not _root():
        return
    names = [path, *(path.with_name(path.name + s) for s in SQLITE_SIDECARS)] if sqlite else [path]
    for name in names:
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        _check_owned(name, st)


def chmod_private_db(path: Path, mode: int = FILE_MODE) -> None:
    """``chmod`` a SQLite database this process has open. As root, a symlink or a file that
    :func:`check_private_path` refuses is refused, and the file is changed through an
    ``O_PATH`` descriptor (closing an ordinary one would drop SQLite's POSIX locks held by
    this process); unprivileged, it is a plain ``os.chmod`` as before."""
    if not _root():
        os.chmod(path, mode)
        return
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_owned(path, os.fstat(fd))  # O_PATH|O_NOFOLLOW: a link is the link itself
        os.chmod(f"/proc/self/fd/{fd}", mode)  # the file that fd is, not what a path names now
    finally:
        os.close(fd)


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
    folder's owner (see the module docstring), an existing one keeps its own. Never follows a
    symlink at ``path`` (:class:`UnsafeFile`); as root, refuses an existing file that is not a
    regular file owned by root or its folder's owner."""
    while True:
        try:
            fd = _open_nofollow(path, flags | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            try:
                fd = _open_nofollow(path, flags)
            except FileNotFoundError:
                continue  # deleted between the two opens: create it after all
            try:
                _check_owned(path, os.fstat(fd))
            except BaseException:
                os.close(fd)
                raise
            return fd
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
    fd = _open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
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
    folder they are created in. A symlink at ``path`` is refused (:class:`UnsafeFile`) unless
    root or this user made it; the mode is set through a descriptor."""
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
    follow = False
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode):
        # The operator's own link (a data dir or agents dir elsewhere) is fine; one made by
        # anybody else (the service user, when this is root) may point anywhere.
        if link.st_uid not in (0, os.geteuid()):
            raise UnsafeFile(
                f"{path} is a symbolic link made by uid {link.st_uid}; refusing to follow it"
            )
        follow = True
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        _refuse_symlink(path, exc)  # replaced by a link since the lstat
        raise
    try:
        os.fchmod(fd, DIR_MODE)  # O_DIRECTORY: a folder, whoever owns it (chmod is all we do)
    finally:
        os.close(fd)
    return path

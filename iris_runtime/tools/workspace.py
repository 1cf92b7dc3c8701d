"""Confining model-supplied paths to a directory the tool is allowed to touch."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iris_runtime.errors import InvalidInput


def confine(workspace: Path, user_path: str) -> Path:
    """Resolve ``user_path`` (relative to ``workspace`` or absolute) and keep it inside.

    Symlinks are followed before the check, so a link inside the workspace that points elsewhere
    is refused rather than written through.
    """
    if "\0" in user_path:
        raise InvalidInput("path contains a NUL byte", code="outside_workspace")
    root = workspace.resolve()
    resolved = (root / user_path).resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput(
            f"path {user_path[:200]!r} is outside the workspace {root}", code="outside_workspace"
        )
    return resolved


def display(workspace: Path, path: Path) -> str:
    """A short name for messages: relative to the workspace when possible."""
    try:
        return str(path.relative_to(workspace.resolve()))
    except ValueError:
        return str(path)


# Opening a confined path without a race: ``confine`` resolves every symlink, so the path it
# returns has none. A command in the sandbox may swap a folder for a symlink (to the data dir)
# after that check, so the file tools walk the resolved path again from a folder descriptor on
# the root, one component at a time with O_NOFOLLOW, and read, create and rename relative to the
# last folder's descriptor: a component that became a symlink is refused, never followed.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _swapped(user_path: str) -> InvalidInput:
    return InvalidInput(
        f"{user_path[:200]} changed while it was being opened (a symlink appeared); refused",
        code="outside_workspace",
    )


@contextmanager
def parent_folder(
    root: Path, path: Path, user_path: str, *, create: bool = False, owner: int | None = None
) -> Iterator[tuple[int, str]]:
    """A descriptor on the folder holding ``path`` (resolved, under ``root``), reached from
    ``root`` without following a symlink, and ``path``'s last component. ``create`` makes
    missing folders on the way, given to uid and gid ``owner`` when set."""
    root_real = root.resolve()
    parts = path.relative_to(root_real).parts
    if not parts:
        raise InvalidInput(f"{user_path} is a directory, not a file")
    fd = os.open(root_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            made = False
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _swapped(user_path) from exc
                raise
            os.close(fd)
            fd = child
            if made and owner is not None:
                os.fchown(fd, owner, owner)
        yield fd, parts[-1]
    finally:
        os.close(fd)


def read_confined(root: Path, path: Path, user_path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (resolved, under ``root``), opened without
    following any symlink. Raises InvalidInput for a folder, a non-file, a missing or too big
    file, or one swapped for a symlink."""
    with parent_folder(root, path, user_path) as (folder, name):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=folder)
        except FileNotFoundError as exc:
            raise InvalidInput(f"{user_path}: no such file") from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _swapped(user_path) from exc
            raise
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise InvalidInput(f"{user_path} is a directory, not a file")
            if not stat.S_ISREG(info.st_mode):
                raise InvalidInput(f"{user_path}: no such file")
            if info.st_size > max_bytes:
                raise InvalidInput(
                    f"{user_path} is {info.st_size} bytes; files over {max_bytes} are refused"
                )
            return fh.read(max_bytes + 1)[:max_bytes]


def write_confined(
    root: Path,
    path: Path,
    user_path: str,
    data: bytes,
    *,
    new_mode: int = 0o644,
    owner: int | None = None,
) -> None:
    """Replace ``path`` (resolved, under ``root``) with ``data`` atomically: a temp file in the
    same folder, then a rename, both relative to the folder's descriptor (never by path).
    ``owner``: the uid (and gid) the file and new folders are given (the sandbox's command's)."""
    with parent_folder(root, path, user_path, create=True, owner=owner) as (folder, name):
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            mode = new_mode
        else:
            if stat.S_ISDIR(info.st_mode):
                raise InvalidInput(f"{user_path} is a directory")
            mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else new_mode
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, flags, 0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                if owner is not None:
                    os.fchown(fh.fileno(), owner, owner)
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise

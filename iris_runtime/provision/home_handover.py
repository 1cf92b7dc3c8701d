"""Handing an agent's home from one user to another as root, by descriptor, so the user who
owns the agents dir cannot redirect root with links or swapped folders.

The home is opened with ``O_NOFOLLOW`` and its owner checked on that descriptor; the walk below
it never follows a link, and only entries of the expected owner change hands (a file some other
user made, or a hard link, stays as it is). A folder swapped for another between check and walk
is not the one walked: the descriptor is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from iris_runtime.errors import ProvisionError


def hand_over(home: Path, owner: int, to_uid: int, to_gid: int) -> int:
    """Give ``home`` and what ``owner`` has in it to ``to_uid:to_gid``; returns how many
    entries changed hands. Refuses a home that is a link or not ``owner``'s."""
    try:
        fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ProvisionError(f"{home} is not a folder to hand over: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != owner:
            raise ProvisionError(f"{home} belongs to uid {info.st_uid}, not {owner}: refused")
        os.fchown(fd, to_uid, to_gid)
        return 1 + _walk(fd, owner, to_uid, to_gid)
    finally:
        os.close(fd)


def _walk(fd: int, owner: int, to_uid: int, to_gid: int) -> int:
    changed = 0
    for _, folders, files, folder_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        for name in (*folders, *files):
            try:
                info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_uid != owner or (not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1):
                continue  # not the owner's, or a hard link to who knows what
            os.chown(name, to_uid, to_gid, dir_fd=folder_fd, follow_symlinks=False)
            changed += 1
    return changed


def safe_ancestors(folder: Path) -> str | None:
    """Why root must not act below ``folder`` (None when it may): a folder above it that
    someone other than root can change lets them swap ``folder`` for a link mid-way."""
    for parent in Path(os.path.abspath(folder)).parents:
        info = os.stat(parent, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            return (
                f"{parent}, above {folder}, is not root's alone (owner uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):o}): keep the agents dir in root-owned folders"
            )
    return None

"""Removing an event file that has fired, without deleting a newer version written over it.

A writer may replace an event file at any moment (``iris events add --replace`` renames a new
version over it), including while Iris removes the version that just ran. Checking the content
and then unlinking the name would delete whatever the name holds by then: possibly the new
version, which never ran. So the file is first taken out of the way by a rename to a private name
in the same folder (atomic: from then on no writer can change what we hold), its content is
checked, and only then is it unlinked. If what we took is not the version that ran, it is put
back with a hard link, which fails rather than overwrite a still newer file that arrived
meanwhile (that one supersedes it, exactly as if the writer had replaced it).

A crash between these steps leaves the private file behind (``.consuming-<digest>.<name>.tmp``,
which the watcher ignores like every dotfile); :func:`recover_consuming` settles it at start-up.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from iris_runtime.events.files import digest, read_bounded

log = logging.getLogger(__name__)

CONSUMING_PREFIX = ".consuming-"
_CONSUMING_SUFFIX = ".tmp"
_DIGEST_CHARS = 64

# removed: the version that ran is gone; gone: nothing was there; newer: another version is
# there (or was, and was itself superseded), and it was left in place.
Outcome = Literal["removed", "gone", "newer"]


def consume(path: Path, expected: str, *, unlink: Callable[[Path], None] = os.remove) -> Outcome:
    """Remove ``path`` if it holds the version whose digest is ``expected``; never remove any
    other version. Raises OSError when the file cannot be taken, checked or put back (a private
    file left behind is then settled by :func:`recover_consuming` at the next start)."""
    current = _digest_of(path)
    if current is None:
        return "gone"
    if current != expected:
        return "newer"  # the common case of a replaced file: leave it where it is
    taken = path.with_name(f"{CONSUMING_PREFIX}{expected}.{path.name}{_CONSUMING_SUFFIX}")
    try:
        os.rename(path, taken)
    except FileNotFoundError:
        return "gone"
    # Between the check above and the rename a writer may have replaced the file: look again at
    # what we actually hold.
    try:
        held = _digest_of(taken)
    except OSError:
        _put_back(taken, path)
        raise
    if held == expected:
        unlink(taken)
        return "removed"
    _put_back(taken, path)
    return "newer"


def recover_consuming(directory: Path) -> list[tuple[str, Outcome]]:
    """Settle the private files a crash left in ``directory``: the version that ran is removed,
    any other is put back under its own name. Returns (event file name, outcome) pairs."""
    settled: list[tuple[str, Outcome]] = []
    try:
        with os.scandir(directory) as scan:
            leftovers = [e.name for e in scan if _is_consuming_name(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return settled
    for leftover in sorted(leftovers):
        body = leftover[len(CONSUMING_PREFIX) : -len(_CONSUMING_SUFFIX)]
        expected, name = body[:_DIGEST_CHARS], body[_DIGEST_CHARS + 1 :]
        taken = directory / leftover
        try:
            held = _digest_of(taken)
        except OSError as exc:
            log.error("events: cannot settle %s in %s: %s", leftover, directory, exc)
            continue
        if held == expected:
            taken.unlink()
            settled.append((name, "removed"))
        else:
            _put_back(taken, directory / name)
            settled.append((name, "newer"))
    return settled


def _is_consuming_name(name: str) -> bool:
    if not (name.startswith(CONSUMING_PREFIX) and name.endswith(_CONSUMING_SUFFIX)):
        return False
    body = name[len(CONSUMING_PREFIX) : -len(_CONSUMING_SUFFIX)]
    head, dot, rest = body[:_DIGEST_CHARS], body[_DIGEST_CHARS : _DIGEST_CHARS + 1], body[65:]
    return len(head) == _DIGEST_CHARS and dot == "." and bool(rest) and "/" not in rest


def _put_back(taken: Path, path: Path) -> None:
    try:
        os.link(taken, path, follow_symlinks=False)
    except FileExistsError:
        # A still newer version arrived meanwhile: the one we hold never ran and never will,
        # the same as when a writer replaces a file that has not fired yet.
        log.info("events: %s was replaced twice while it was being removed; the newest stays", path)
    os.unlink(taken)


def _digest_of(path: Path) -> str | None:
    """The digest of the file at ``path``; None when there is none, "" when what is there is not
    a regular file (a symlink, a folder: never a version of an event). Raises other OSErrors."""
    try:
        return digest(read_bounded(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):
            return ""
        raise

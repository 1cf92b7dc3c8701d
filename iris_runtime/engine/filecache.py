"""What a run reads from the workspace on every message (CONSTITUTION.md, MEMORY.md, the skills'
SKILL.md files and folders), reused while the file is unchanged: one ``stat`` instead of a read
and, for a skill, a YAML parse.

"Unchanged" is the file's inode, size, mtime and ctime. File times are coarse (a kernel tick),
so two writes within one tick can leave the same times; a value is therefore only kept once its
file's times lie ``SETTLED_NS`` in the past when it was read, as git does for its index. Any later
write then carries a newer time, and the file is read again.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

SETTLED_NS = 2_000_000_000
MAX_ENTRIES = 512

Signature = tuple[int, int, int, int]


def signature(path: str | Path) -> Signature | None:
    """The file's inode, size, mtime and ctime, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileCache(Generic[T]):
    """``load(path)`` results by path (a string: pathlib costs more than the stat), reused
    while the path's signature holds."""

    def __init__(self, load: Callable[[str], T], missing: Callable[[str], T]) -> None:
        self._load = load
        self._missing = missing  # what a path that cannot be stat'ed gives (never cached)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[Signature, T]] = OrderedDict()

    def get(self, path: str) -> T:
        sig = signature(path)
        if sig is None:
            return self._missing(path)
        with self._lock:
            hit = self._entries.get(path)
        if hit is not None and hit[0] == sig:
            return hit[1]
        value = self._load(path)  # read after the stat: a newer file never hides behind `sig`
        if time.time_ns() - max(sig[2], sig[3]) > SETTLED_NS:
            with self._lock:
                self._entries[path] = (sig, value)
                self._entries.move_to_end(path)
                while len(self._entries) > MAX_ENTRIES:
                    self._entries.popitem(last=False)
        return value

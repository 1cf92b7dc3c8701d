"""Paths from channel ids and file names: the only way to build one (no traversal, no odd names).

Channel ids come from chat platforms, API callers and event files; file names from uploads. Both
are validated here before any path is built from them, and the resolved result is checked to stay
inside the data dir, so a hostile id can never escape it.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.data_layout import is_reserved
from iris_runtime.errors import InvalidInput

# Letters, digits and the few separators chat platforms put in their ids ("C123.456", "tg--1").
_CHANNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,199}")
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SESSION_PREFIX = "SESSION-"
MAX_FILENAME_BYTES = 200


def validate_channel_id(channel_id: str) -> str:
    if not _CHANNEL_ID.fullmatch(channel_id) or ".." in channel_id:
        raise InvalidInput(
            f"invalid channel id {channel_id[:80]!r}: use letters, digits and . _ @ + - "
            "(at most 200, starting with a letter or digit)",
            code="invalid_channel_id",
        )
    # A channel's folder sits beside the data dir's own entries, so it must never alias one.
    if is_reserved(channel_id):
        raise InvalidInput(
            f"channel id {channel_id!r} is reserved: it names one of Iris's own files or "
            "folders in the data dir (in any case)",
            code="invalid_channel_id",
        )
    return channel_id


def reserve_folder(name: str) -> None:
    """Refuse ``name`` (in any case) as a channel id from now on (see data_layout)."""
    data_layout.reserve_folder(name)
    _channel_dir.cache_clear()  # an id resolved before is not to be trusted any more


def is_safe_token(value: str) -> bool:
    """Letters, digits and ``. _ -``, at most 128, starting with a letter or digit, no ``..``:
    safe to use as a file or folder name."""
    return bool(_SAFE_TOKEN.fullmatch(value)) and ".." not in value


def validate_token(value: str, what: str, code: str) -> str:
    if not is_safe_token(value):
        raise InvalidInput(
            f"invalid {what} {value[:80]!r}: use letters, digits and . _ - "
            "(at most 128, starting with a letter or digit)",
            code=code,
        )
    return value


def validate_session_id(session_id: str) -> str:
    return validate_token(session_id, "session id", "invalid_session_id")


def session_channel(session_id: str) -> str:
    """The channel that backs an internal-API session."""
    return SESSION_PREFIX + validate_session_id(session_id)


def validate_filename(name: str) -> str:
    """A bare file name: no separators, no dot-dot, no NUL or control characters."""
    problem = None
    if not name or name in {".", ".."}:
        problem = "is empty or a dot name"
    elif "/" in name or "\\" in name:
        problem = "contains a path separator"
    elif ".." in name:
        problem = "contains '..'"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        problem = "contains NUL or control characters"
    elif len(name.encode("utf-8", "surrogatepass")) > MAX_FILENAME_BYTES:
        problem = f"is longer than {MAX_FILENAME_BYTES} bytes"
    elif name.startswith("."):
        problem = "starts with a dot"
    if problem:
        raise InvalidInput(
            f"invalid file name {name[:80]!r}: it {problem}", code="invalid_filename"
        )
    return name


@functools.lru_cache(maxsize=64)
def _resolved_base(base: Path) -> Path:
    return base.resolve()  # the data dir, and a channel's folder under it: fixed once made


def _inside(base: Path, candidate: Path) -> Path:
    resolved = candidate.resolve()
    if not resolved.is_relative_to(_resolved_base(base)):
        raise InvalidInput("path escapes its directory", code="path_traversal")
    return resolved


@functools.lru_cache(maxsize=4096)
def _channel_dir(data_dir: Path, channel_id: str) -> Path:
    # Resolving walks the filesystem; a run asks for its channel's folder several times.
    candidate = data_dir / validate_channel_id(channel_id)
    try:
        is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
    except FileNotFoundError:
        is_link = False
    except OSError:
        is_link = True  # let the full resolution decide
    if not is_link:
        # A valid id is one plain name under the data dir: unless it is a symlink, it resolves
        # to the resolved data dir plus that name (one lstat instead of a realpath walk).
        return _resolved_base(data_dir) / channel_id
    return _inside(data_dir, candidate)


def resolve_channel_dir(data_dir: Path, channel_id: str, *, create: bool = False) -> Path:
    """The folder that holds one channel's log and attachments."""
    directory = _channel_dir(data_dir, channel_id)
    if create and not os.path.isdir(directory):  # one stat, not a failed mkdir, once it exists
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def resolve_channel_path(data_dir: Path, channel_id: str, *names: str) -> Path:
    """A file inside a channel's folder, e.g. ``(data, "SESSION-a", "attachments", "x.pdf")``."""
    directory = resolve_channel_dir(data_dir, channel_id)
    return _inside(directory, directory.joinpath(*(validate_filename(n) for n in names)))

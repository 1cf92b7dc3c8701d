"""Files in and out of a conversation, always inside its channel folder.

Every path is built with the engine's ``resolve_channel_path`` (validated names, resolved result
checked to stay inside the channel's folder). Uploads land in ``attachments/``, files the agent
attaches are copied to ``files/``; downloads are served from those two folders only, never from
the log or anywhere else.
"""

from __future__ import annotations

import os
import re
import time
import unicodedata
from pathlib import Path
from typing import IO
from urllib.parse import quote

from iris_runtime.engine.channels import resolve_channel_dir, resolve_channel_path
from iris_runtime.errors import InvalidInput, IrisError, NotFound
from iris_webui.profile import CHANNEL_PREFIX

ATTACHMENTS_DIR = "attachments"
FILES_DIR = "files"
SERVED_DIRS = (ATTACHMENTS_DIR, FILES_DIR)
CHUNK = 64 * 1024
MAX_NAME_BYTES = 180  # + the "<stamp>-<n>_" prefix (<= 20): the engine's 200-byte cap
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The channel of a browser conversation, as session_of accepts it.
CHANNEL_ID = re.compile(re.escape(CHANNEL_PREFIX) + _SESSION_ID.pattern)
_UNSAFE = re.compile(r"[^\w.+ ()\[\]-]+")


class TooLarge(IrisError):
    code = "payload_too_large"
    status = 413


def channel_of(session_id: str) -> str:
    """The channel of a browser conversation; raises on an id that is not ours."""
    if not _SESSION_ID.fullmatch(session_id):
        raise InvalidInput(
            "a session id is 1-64 letters, digits, '_' or '-'", code="invalid_session_id"
        )
    return CHANNEL_PREFIX + session_id


def session_of(channel: str) -> str | None:
    if not channel.startswith(CHANNEL_PREFIX):
        return None
    rest = channel[len(CHANNEL_PREFIX) :]
    return rest if _SESSION_ID.fullmatch(rest) else None


def safe_name(name: str) -> str:
    """A harmless file name from whatever a browser or a tool said: the last path component,
    odd characters replaced, no leading dots, at most ``MAX_NAME_BYTES`` in UTF-8: names are
    capped in bytes (the engine's channel paths allow 200 with the ``<stamp>_`` prefix), and
    95 Cyrillic letters are 190 bytes, so a character count would not do."""
    base = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip(" ._")
    base = base.replace("..", "_")
    if _bytes(base) > MAX_NAME_BYTES:  # keep a short extension: it tells people what the file is
        stem, dot, ext = base.rpartition(".")
        keep = dot + ext if stem and _bytes(ext) <= 16 else ""
        room = MAX_NAME_BYTES - _bytes(keep)
        cut = base.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
        base = cut.rstrip(" ._") + keep
    return base or "file"


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def store_path(data_dir: Path, channel: str, folder: str, name: str) -> Path:
    """A new, unused path ``<channel>/<folder>/<stamp>_<name>`` (the folder is created)."""
    directory = resolve_channel_dir(data_dir, channel, create=True) / folder
    directory.mkdir(mode=0o700, exist_ok=True)
    stamp = int(time.time() * 1000)
    for attempt in range(100):
        stored = f"{stamp}_{name}" if attempt == 0 else f"{stamp}-{attempt}_{name}"
        path = resolve_channel_path(data_dir, channel, folder, stored)
        if not path.exists():
            return path
    raise InvalidInput("could not pick a unique file name", code="file_conflict")


def file_url(channel: str, relative: str) -> str:
    session = session_of(channel) or ""
    return f"/api/sessions/{session}/files/" + "/".join(quote(p) for p in relative.split("/"))


def save_upload(
    data_dir: Path, channel: str, stream: IO[bytes], filename: str, limit: int
) -> dict[str, str]:
    name = safe_name(filename)
    path = store_path(data_dir, channel, ATTACHMENTS_DIR, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    size = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"the file is larger than {limit} bytes")
                handle.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    relative = f"{ATTACHMENTS_DIR}/{path.name}"
    return {"name": name, "path": relative, "url": file_url(channel, relative)}


def resolve_served(data_dir: Path, channel: str, relative: str) -> Path:
    """A file under the channel's ``attachments/`` or ``files/``; NotFound for anything else
    (a traversal attempt, the log, a folder, a missing file)."""
    parts = relative.split("/")
    if len(parts) != 2 or parts[0] not in SERVED_DIRS:
        raise NotFound("no such file", code="file_not_found")
    try:
        path = resolve_channel_path(data_dir, channel, *parts)
    except InvalidInput:
        raise NotFound("no such file", code="file_not_found") from None
    if not path.is_file():
        raise NotFound("no such file", code="file_not_found")
    return path


def attachment_name(stored: str) -> str:
    """The name a person gave a file, without the ``<stamp>_`` prefix it is stored under."""
    return stored.partition("_")[2] or stored

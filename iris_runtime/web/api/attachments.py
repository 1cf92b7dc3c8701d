"""Staged attachments: bytes in, an opaque ``local`` handle out; handles back in, files out.

A handle is ``SESSION-<id>/attachments/<stamp>_<name>``. It is only ever produced here, and on
use it must belong to the same session and name a file that exists.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from flask import request

from iris_runtime.engine.channels import (
    resolve_channel_dir,
    resolve_channel_path,
    validate_filename,
)
from iris_runtime.engine.transport import Attachment
from iris_runtime.errors import InvalidInput

ATTACHMENTS = "attachments"
CHUNK = 64 * 1024


def _header_filename() -> str:
    raw = request.headers.get("X-Filename")
    if raw is None:
        raise InvalidInput("the X-Filename header is required", code="missing_filename")
    # HTTP headers arrive decoded as latin-1; clients send UTF-8 bytes.
    with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
        raw = raw.encode("latin-1").decode("utf-8")
    return validate_filename(raw)


def _create_exclusive(directory: Path, name: str) -> tuple[Path, int]:
    stamp = int(time.time() * 1000)
    for attempt in range(100):
        candidate = directory / (f"{stamp}_{name}" if attempt == 0 else f"{stamp}-{attempt}_{name}")
        try:
            return candidate, os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
    raise InvalidInput("could not pick a unique attachment name", code="attachment_conflict")


def save_upload(data_dir: Path, channel: str) -> dict[str, Any]:
    name = _header_filename()
    chunk = request.stream.read(CHUNK)  # over the body limit → 413
    if not chunk:
        # Nearly always a client that forgot the file (curl without --data-binary), not a
        # deliberate zero-byte file: say so before anything is created.
        raise InvalidInput(
            "the request body is empty: send the file's bytes (e.g. curl --data-binary @file)",
            code="empty_attachment",
        )
    directory = resolve_channel_dir(data_dir, channel, create=True) / ATTACHMENTS
    directory.mkdir(mode=0o700, exist_ok=True)
    resolve_channel_path(data_dir, channel, ATTACHMENTS, name)  # same checks as on use
    path, fd = _create_exclusive(directory, name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            while chunk:
                size += len(chunk)
                handle.write(chunk)
                chunk = request.stream.read(CHUNK)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return {"local": f"{channel}/{ATTACHMENTS}/{path.name}", "bytes": size}


def resolve_handles(data_dir: Path, channel: str, items: Any) -> tuple[Attachment, ...]:
    """The handles of a message's ``attachments`` field (``[]`` when absent; ``null`` is not a
    list and is refused like any other non-list)."""
    if not isinstance(items, list):
        raise InvalidInput(
            "'attachments' must be a list of {\"local\": handle}", code="invalid_field"
        )
    return tuple(_resolve_handle(data_dir, channel, item) for item in items)


def _resolve_handle(data_dir: Path, channel: str, item: Any) -> Attachment:
    if not isinstance(item, dict) or set(item) != {"local"} or not isinstance(item["local"], str):
        raise InvalidInput(
            'each attachment must be {"local": handle} as returned by POST …/attachments '
            "(attachments by URL are not fetched)",
            code="invalid_attachment",
        )
    handle = item["local"]
    owner, _, rest = handle.partition("/")
    kind, _, name = rest.partition("/")
    if owner != channel:
        raise InvalidInput(
            f"attachment {handle!r} belongs to another session", code="foreign_attachment"
        )
    if kind != ATTACHMENTS or not name:
        raise InvalidInput(f"unknown attachment handle {handle!r}", code="unknown_attachment")
    try:
        path = resolve_channel_path(data_dir, channel, ATTACHMENTS, name)
    except InvalidInput:
        raise InvalidInput(
            f"unknown attachment handle {handle!r}", code="unknown_attachment"
        ) from None
    if not path.is_file():
        raise InvalidInput(f"unknown attachment handle {handle!r}", code="unknown_attachment")
    return Attachment(local=handle, name=name.partition("_")[2] or name)

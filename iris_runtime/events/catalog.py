"""Managing events without hand-writing JSON: the operations ``iris events`` and the API share.

Both work on the files, never on the running service: a file is the one source of truth, so an
event added while Iris is down is scheduled when it starts, and whatever the watcher would say
about a hand-written file it says about these too. Names are checked before any path is built
from them (no traversal), nothing is reached through a symlink (a symlinked folder is refused, a
symlinked event is handled as the link itself), and every write is atomic.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from iris_runtime.errors import InvalidInput
from iris_runtime.events.files import (
    SUFFIX,
    EventSpec,
    Folder,
    create_exclusive,
    encode_event,
    error_path,
    event_path,
    existing_event_path,
    folder_problem,
    is_event_file_name,
    parse_event_bytes,
    read_bounded,
    read_reason,
    usable_folder,
    write_atomic,
)

NextTime = Callable[[str], datetime | None]


def list_events(
    data_dir: Path,
    folders: list[Folder],
    now: datetime,
    *,
    waiting: Mapping[str, str] | None = None,
    next_time: NextTime | None = None,
) -> list[dict[str, Any]]:
    """Every event file in ``folders``, valid or not, as plain JSON-able dicts. A folder that is
    a symlink is skipped (the watcher does not use it either, and logs why)."""
    out: list[dict[str, Any]] = []
    for folder in folders:
        directory = data_dir / folder.rel
        if folder_problem(data_dir, folder) is not None:
            continue
        try:
            with os.scandir(directory) as scan:
                names = sorted(
                    e.name
                    for e in scan
                    if is_event_file_name(e.name) and e.is_file(follow_symlinks=False)
                )
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            out.append(_describe(data_dir, folder, directory / name, now, waiting or {}, next_time))
    return out


def _describe(
    data_dir: Path,
    folder: Folder,
    path: Path,
    now: datetime,
    waiting: Mapping[str, str],
    next_time: NextTime | None,
) -> dict[str, Any]:
    entry = _blank_entry(data_dir, folder, path)
    try:
        spec = parse_event_bytes(read_bounded(path))
    except (InvalidInput, OSError) as exc:
        entry["status"] = "rejected"
        entry["error"] = exc.message if isinstance(exc, InvalidInput) else str(exc)
        return entry
    rel = entry["id"]
    reason = read_reason(error_path(path))
    status = "rejected" if reason else "waiting" if rel in waiting else "scheduled"
    upcoming = next_time(rel) if next_time is not None else None
    return _filled(entry, spec, status, upcoming or _next_fire(spec, now), reason)


def describe_written(
    data_dir: Path, folder: Folder, path: Path, spec: EventSpec, now: datetime
) -> dict[str, Any]:
    """The entry of an event just written from ``spec``, without reading the folder again: the
    file may be gone already (an immediate event runs within a second of being written)."""
    return _filled(_blank_entry(data_dir, folder, path), spec, "scheduled", _next_fire(spec, now))


def _blank_entry(data_dir: Path, folder: Folder, path: Path) -> dict[str, Any]:
    return {
        "name": path.name[: -len(SUFFIX)],
        "id": path.relative_to(data_dir).as_posix(),
        "transport": folder.transport,
        "status": "scheduled",
        "type": None,
        "channelId": None,
        "text": None,
        "at": None,
        "schedule": None,
        "timezone": None,
        "next": None,
        "error": None,
    }


def _filled(
    entry: dict[str, Any],
    spec: EventSpec,
    status: str,
    upcoming: datetime,
    reason: str | None = None,
) -> dict[str, Any]:
    entry.update(spec.to_json())
    entry.update(status=status, next=upcoming.isoformat(), error=reason)
    return entry


def _next_fire(spec: EventSpec, now: datetime) -> datetime:
    if spec.at is not None:
        return spec.at
    if spec.schedule is not None:
        try:
            return spec.schedule.next_after(now, spec.zone)
        except InvalidInput:
            return now
    return now


def add_event(
    data_dir: Path, folder: Folder, name: str, spec: EventSpec, *, replace: bool = False
) -> Path:
    """Write event ``name`` (EventExists if it exists and ``replace`` is not set)."""
    usable_folder(data_dir, folder)
    path = event_path(data_dir, folder, name)
    data = encode_event(spec)
    if replace:
        write_atomic(path, data)
    else:
        create_exclusive(path, data)
    return path


def remove_event(data_dir: Path, folder: Folder, name: str) -> Path:
    """Delete event ``name`` (NotFound if there is none), and our reason file with it. A symlink
    is removed itself; what it points to is left alone."""
    path = existing_event_path(data_dir, folder, name)
    path.unlink()  # never follows a symlink
    error_path(path).unlink(missing_ok=True)
    return path


def fire_event(data_dir: Path, folder: Folder, name: str, now: datetime) -> Path:
    """Run event ``name`` once now: an immediate copy of it next to it. Its own schedule is left
    alone; the copy goes through the same lose-nothing path as any immediate event."""
    source = existing_event_path(data_dir, folder, name)
    if source.is_symlink():
        raise InvalidInput(
            f"cannot fire {name!r}: it is a symbolic link (event files are regular files, and "
            "links are never followed)",
            code="invalid_event",
        )
    try:
        spec = parse_event_bytes(read_bounded(source))
    except InvalidInput as exc:
        raise InvalidInput(f"cannot fire {name!r}: {exc.message}", code="invalid_event") from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise InvalidInput(f"cannot fire {name!r}: {why}", code="invalid_event") from None
    copy = EventSpec("immediate", spec.channel, spec.text)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    copy_name = f"{source.stem[:96]}.fired-{stamp}-{secrets.token_hex(3)}"
    return add_event(data_dir, folder, copy_name, copy)

"""Event files: what one may contain, how it is read, and how Iris writes one.

An event file is one JSON object in a watched folder (``events/`` for any channel, or
``<transport>/events/`` for that transport's channels). Everything read from disk is checked here
and turned into a frozen :class:`EventSpec`, or refused with a reason a person can act on: the
reason is written next to the file (``<file>.error``) by the watcher, so a bad file is never lost
silently. The CLI and the API write files through :func:`write_atomic`, so the watcher never sees
half of one of theirs.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iris_runtime import data_layout
from iris_runtime.engine.channels import is_safe_token, validate_channel_id
from iris_runtime.errors import InvalidInput, IrisError, NotFound
from iris_runtime.events.cron import CronSchedule
from iris_runtime.private_files import write_private_file

EventType = Literal["immediate", "one-shot", "periodic"]
EVENT_TYPES: tuple[EventType, ...] = ("immediate", "one-shot", "periodic")
ROOT_FOLDER = data_layout.EVENTS_DIR
# The per-transport folders the spec names; a loaded transport with another id gets its own too.
KNOWN_TRANSPORT_FOLDERS = (data_layout.SLACK_DIR, data_layout.TELEGRAM_DIR)
SUFFIX = ".json"
ERROR_SUFFIX = ".error"
# An event is a prompt, not a document: anything larger is a mistake (or not an event file).
MAX_EVENT_BYTES = 64 * 1024
# Our reasons are one line; a longer "reason file" is not one of ours and is not read whole.
MAX_REASON_BYTES = 4096
_FIELDS: dict[EventType, frozenset[str]] = {
    "immediate": frozenset({"type", "channelId", "text"}),
    "one-shot": frozenset({"type", "channelId", "text", "at"}),
    "periodic": frozenset({"type", "channelId", "text", "schedule", "timezone"}),
}


class EventExists(IrisError):
    """An event of that name is already in the folder (and replacing was not asked for)."""

    code = "event_exists"
    status = 409


class EventsUnavailable(IrisError):
    """Scheduled events are disabled in this process (``state.db`` could not be opened)."""

    code = "events_unavailable"
    status = 503


def _invalid(reason: str) -> InvalidInput:
    return InvalidInput(reason, code="invalid_event")


@dataclass(frozen=True)
class Folder:
    """A watched folder: ``rel`` is relative to the data dir; ``transport`` is the transport its
    events must be delivered by (None for ``events/``, which routes by channel id alone)."""

    rel: str
    transport: str | None = None


def folders_for(transport_ids: list[str]) -> list[Folder]:
    """The watched folders: ``events/`` plus ``<id>/events/`` for the named transports and those
    the spec names. A running Iris names its loaded transports that claim channels."""
    ids = sorted({*KNOWN_TRANSPORT_FOLDERS, *(t for t in transport_ids if is_safe_token(t))})
    return [Folder(ROOT_FOLDER), *(Folder(f"{t}/{ROOT_FOLDER}", t) for t in ids)]


def folders_on_disk(data_dir: Path) -> list[Folder]:
    """The watched folders as far as can be told without a running Iris (the CLI's view):
    those of :func:`folders_for`, plus ``<id>/events/`` wherever such a real folder exists. A
    running Iris creates that folder at start-up for each loaded transport, so a transport from
    a plugin is known once Iris has run with it."""
    try:
        with os.scandir(data_dir) as scan:
            candidates = [e.name for e in scan if is_safe_token(e.name) and e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        candidates = []
    ids = [
        name
        for name in candidates
        if stat.S_ISDIR(_lstat_mode(data_dir / name / ROOT_FOLDER))
        and folder_problem(data_dir, Folder(f"{name}/{ROOT_FOLDER}", name)) is None
    ]
    return folders_for(ids)


def folder_of(transport: str | None) -> Folder:
    """The folder API and CLI callers mean by ``transport`` (None: ``events/``)."""
    if transport is None or transport == "":
        return Folder(ROOT_FOLDER)
    if not is_safe_token(transport):
        raise InvalidInput(f"invalid transport {transport[:40]!r}", code="invalid_transport")
    return Folder(f"{transport}/{ROOT_FOLDER}", transport)


def choose_folder(watched: list[Folder], transport: str | None) -> Folder:
    """The folder for ``transport`` among the ``watched`` ones; InvalidInput
    (``invalid_transport``) for any other, which nothing would ever read."""
    folder = folder_of(transport)
    if folder in watched:
        return folder
    known = ", ".join(f.transport for f in watched if f.transport is not None)
    raise InvalidInput(
        f"no events folder is watched for transport {transport!r} (known: {known}); leave the "
        f"transport out to use {ROOT_FOLDER}/, which delivers to any channel",
        code="invalid_transport",
    )


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


@dataclass(frozen=True)
class EventSpec:
    """One validated event. ``at`` is aware (its own offset kept); ``timezone`` is an IANA key."""

    type: EventType
    channel: str
    text: str
    at: datetime | None = None
    schedule: CronSchedule | None = None
    timezone: str | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone or "UTC")

    def to_json(self) -> dict[str, str]:
        """The file form (the same fields a person would write)."""
        out = {"type": self.type, "channelId": self.channel, "text": self.text}
        if self.at is not None:
            out["at"] = self.at.isoformat()
        if self.schedule is not None:
            out["schedule"] = self.schedule.expr
            out["timezone"] = self.timezone or "UTC"
        return out


def parse_event_bytes(raw: bytes) -> EventSpec:
    """Validate the bytes of an event file; raises InvalidInput with the reason."""
    if len(raw) > MAX_EVENT_BYTES:
        raise _invalid(f"the file is larger than {MAX_EVENT_BYTES} bytes")
    if not raw.strip():
        raise _invalid("the file is empty")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _invalid("the file is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _invalid(f"malformed JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _invalid("the file must hold one JSON object")
    return parse_event_fields(body)


def parse_event_fields(body: dict[str, Any]) -> EventSpec:
    """Validate an event given as fields (a parsed file, or an API body without its extras)."""
    kind = body.get("type")
    if kind not in EVENT_TYPES:
        allowed = ", ".join(repr(t) for t in EVENT_TYPES)
        raise _invalid(f"'type' must be one of {allowed}, not {_shown(kind)}")
    event_type = cast(EventType, kind)
    unknown = sorted(set(body) - _FIELDS[event_type])
    if unknown:
        raise _invalid(f"unknown field(s) for a {event_type} event: {', '.join(unknown)}")
    missing = sorted(_FIELDS[event_type] - set(body))
    if missing:
        raise _invalid(f"missing field(s) for a {event_type} event: {', '.join(missing)}")
    channel = _text_field(body, "channelId")
    try:
        validate_channel_id(channel)
    except InvalidInput as exc:
        raise _invalid(f"'channelId': {exc.message}") from None
    text = _text_field(body, "text")
    if event_type == "one-shot":
        return EventSpec(event_type, channel, text, at=_instant(_text_field(body, "at")))
    if event_type == "periodic":
        schedule, zone = _cron(_text_field(body, "schedule")), _zone(_text_field(body, "timezone"))
        return EventSpec(event_type, channel, text, schedule=schedule, timezone=zone)
    return EventSpec(event_type, channel, text)


def _shown(value: object) -> str:
    return repr(value)[:60]


def _text_field(body: dict[str, Any], name: str) -> str:
    value = body[name]
    if not isinstance(value, str) or not value.strip():
        raise _invalid(f"{name!r} must be a non-empty string, not {_shown(value)}")
    return value


def _instant(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise _invalid(
            f"'at' is not an ISO-8601 time: {text[:60]!r} (e.g. 2030-01-31T09:00:00+01:00)"
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise _invalid(
            f"'at' has no UTC offset: {text[:60]!r}; add one, e.g. {at.isoformat()}+00:00 or Z"
        )
    try:
        # Near year 1 or 9999 an offset can push the instant outside what a datetime holds; such
        # a file would otherwise fail later, at scheduling, where no reason reaches its author.
        at.astimezone(UTC)
    except (OverflowError, ValueError):
        raise _invalid(f"'at' is out of range: {text[:60]!r} has no UTC equivalent") from None
    return at


def _cron(text: str) -> CronSchedule:
    try:
        return _parsed_cron(text)
    except InvalidInput as exc:
        raise _invalid(f"'schedule': {exc.message}") from None


@functools.lru_cache(maxsize=1024)
def _parsed_cron(text: str) -> CronSchedule:
    # Many files share a handful of schedules; a parsed schedule is immutable, so share it.
    return CronSchedule.parse(text)


def _zone(name: str) -> str:
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _invalid(
            f"'timezone' is not a known IANA time zone: {name[:60]!r} (e.g. Europe/Berlin)"
        ) from None
    return name.strip()


# -- names and paths ----------------------------------------------------------------------------


def is_event_file_name(name: str) -> bool:
    """Names the watcher treats as events: ``*.json``, not hidden, not a temp file."""
    return name.endswith(SUFFIX) and not name.startswith(".") and len(name) > len(SUFFIX)


def is_ignored_name(name: str) -> bool:
    """Dotfiles, temp files and our own reason files are never events (nor worth a warning)."""
    return name.startswith(".") or name.endswith((".tmp", ERROR_SUFFIX, "~"))


def validate_event_name(name: str) -> str:
    """An event name as the CLI and API take it (``digest`` or ``digest.json``): a bare, safe
    file name, so no caller can point outside its folder."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    if not is_safe_token(stem) or stem.endswith((".tmp", ERROR_SUFFIX)):
        raise InvalidInput(
            f"invalid event name {name[:80]!r}: use letters, digits and . _ - (at most 128, "
            "starting with a letter or digit, no '..', no path)",
            code="invalid_event_name",
        )
    return stem


def folder_problem(data_dir: Path, folder: Folder) -> str | None:
    """Why ``folder`` must not be used, or None (also when it does not exist yet).

    Each part of its path below the data dir must be a real folder: through a symlink, Iris
    would read and consume (delete) files outside its data dir, and ``iris events rm`` would
    delete them."""
    current = data_dir
    for part in folder.rel.split("/"):
        current = current / part
        shown = current.relative_to(data_dir).as_posix()
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{shown}/ cannot be examined: {exc.strerror}"
        if stat.S_ISLNK(mode):
            return (
                f"{shown} is a symbolic link; event folders must be real folders inside the "
                "data dir, so it is not used"
            )
        if not stat.S_ISDIR(mode):
            return f"{shown} is not a folder"
    return None


def usable_folder(data_dir: Path, folder: Folder) -> None:
    """Refuse (InvalidInput, ``unsafe_folder``) to read or write through a folder that
    :func:`folder_problem` objects to."""
    problem = folder_problem(data_dir, folder)
    if problem is not None:
        raise InvalidInput(problem, code="unsafe_folder")


def event_path(data_dir: Path, folder: Folder, name: str) -> Path:
    """The file of event ``name`` in ``folder``. Nothing is resolved: the name is a bare file
    name (so it cannot leave the folder), and a symlink is handled as the link itself."""
    return data_dir / folder.rel / (validate_event_name(name) + SUFFIX)


def existing_event_path(data_dir: Path, folder: Folder, name: str) -> Path:
    """Like :func:`event_path`, but NotFound unless a file (or a symlink, which is never
    followed) of that name is there."""
    usable_folder(data_dir, folder)
    path = event_path(data_dir, folder, name)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = 0
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise NotFound(f"no event {name!r} in {folder.rel}/", code="unknown_event")
    return path


def error_path(path: Path) -> Path:
    return path.with_name(path.name + ERROR_SUFFIX)


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# -- reading and writing -----------------------------------------------------------------------


def read_bounded(path: str | Path, limit: int = MAX_EVENT_BYTES) -> bytes:
    """At most one byte more than ``limit`` (so a huge file is refused, not loaded). Never
    follows a symlink, never blocks on a FIFO, reads nothing but a regular file (OSError else)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_reason(path: Path) -> str | None:
    """The text of the reason file ``path``, or None when there is none we wrote. Whatever else
    carries that name (a symlink, a FIFO, a device, a folder) is not read: following it could
    hang the watcher, exhaust memory or show another file's content to API callers."""
    try:
        raw = read_bounded(path, MAX_REASON_BYTES)
    except OSError:
        return None
    return raw[:MAX_REASON_BYTES].decode("utf-8", errors="replace").strip() or None


def write_reason(event: Path, reason: str) -> None:
    """Write why ``event`` was rejected next to it (unless that is already what it says)."""
    text = reason.strip()[: MAX_REASON_BYTES // 4]  # at most 4 bytes per character in UTF-8
    path = error_path(event)
    if read_reason(path) != text:
        write_atomic(path, f"{text}\n".encode())


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a hidden temp file in the same folder, fsync, rename, fsync the folder: readers
    see the old file or the whole new one, and a crash leaves one of the two. (The temp file's
    name starts with a dot and ends in ``.tmp``, so the watcher never reads it.)"""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private_file(path, data)


def create_exclusive(path: Path, data: bytes) -> None:
    """Like :func:`write_atomic`, but refuse (EventExists) if ``path`` already exists; the check
    and the creation are one step (a hard link), so two writers cannot both win."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    write_private_file(staged, data)  # complete and durable before it gets the real name
    try:
        os.link(staged, path)
    except FileExistsError:
        raise EventExists(f"an event named {path.stem!r} already exists") from None
    finally:
        staged.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def encode_event(spec: EventSpec) -> bytes:
    return (json.dumps(spec.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

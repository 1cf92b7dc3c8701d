"""Durable per-request job logs: ``bridge-jobs/<requestId>.jsonl``.

Every status, final and error event of a bridge request is appended (one JSON line, monotonic
``seq``) before it is streamed, so a caller whose connection dropped can fetch the rest with
``GET /bridge/jobs/<id>?since=<seq>``. Heartbeats are never logged: silence in the log means the
agent is wedged. Old logs are removed by a retention sweep.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.bridge.protocol import TERMINAL_TYPES, validate_request_id
from iris_runtime.errors import IrisError, NotFound
from iris_runtime.failpoints import failpoint

log = logging.getLogger(__name__)

JOBS_DIR = data_layout.BRIDGE_JOBS_DIR
FINISHED_CACHE_SIZE = 64
TAIL_BYTES = 64 * 1024

Event = dict[str, Any]


class JobExists(IrisError):
    code = "request_id_in_use"
    status = 409


class Job:
    """One request's log, in memory for live streams and on disk for recovery."""

    def __init__(self, request_id: str, path: Path, fd: int | None = None) -> None:
        self.request_id = request_id
        self.path = path
        self.events: list[Event] = []
        # Each event as a stream line (no "ts"), serialized once: the log line is built from it.
        self.lines: list[str] = []
        self._changed = threading.Condition()
        # The log's descriptor (O_APPEND), opened once and closed after the terminal event:
        # an event costs one write(2), which puts its line in the file as before.
        self._fd = fd

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1]["type"] in TERMINAL_TYPES

    def append(self, kind: str, **fields: Any) -> Event | None:
        """Log then publish one event; nothing is appended after the terminal one."""
        with self._changed:
            if self.done:
                return None
            event = {"type": kind, **fields, "seq": len(self.events) + 1}
            event.pop("ts", None)  # ours alone
            ts = round(time.time(), 3)
            shown, logged = _serialized(event, ts)
            event["ts"] = ts
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            os.write(self._fd, logged)
            failpoint(f"bridge.job_logged.{kind}")  # on disk, not yet streamed
            self.events.append(event)
            self.lines.append(shown + "\n")
            if kind in TERMINAL_TYPES:
                self._close()
            self._changed.notify_all()
            return event

    def close(self) -> None:
        """Release the log's descriptor (a later append reopens it)."""
        with self._changed:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def wait_after(self, seq: int, timeout: float) -> list[Event]:
        """Events after ``seq``, waiting up to ``timeout`` for one to arrive."""
        with self._changed:
            if len(self.events) <= seq:
                self._changed.wait(timeout)
            return self.events[seq:]

    def wait_lines_after(self, seq: int, timeout: float) -> tuple[str, bool]:
        """The stream lines of the events after ``seq`` (waiting up to ``timeout`` for one), as
        one text, and whether they end the job."""
        with self._changed:
            if len(self.lines) <= seq:
                self._changed.wait(timeout)
            return "".join(self.lines[seq:]), self.done


def _serialized(event: Event, ts: float) -> tuple[str, bytes]:
    """The stream line (without ``ts``) and the log line (the same plus ``ts``, encoded): one
    JSON pass. UTF-8 where it can be; a lone surrogate (which no UTF-8 can carry) makes the
    line ASCII with escapes, so the event is still logged and streamed."""
    shown = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    try:
        return shown, f'{shown[:-1]},"ts":{ts}}}\n'.encode()
    except UnicodeEncodeError:
        shown = json.dumps(event, separators=(",", ":"))
        return shown, f'{shown[:-1]},"ts":{ts}}}\n'.encode()


class JobStore:
    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / JOBS_DIR
        self._live: dict[str, Job] = {}
        self._finished_cache: OrderedDict[str, list[Event]] = OrderedDict()
        self._lock = threading.Lock()

    def _path(self, request_id: str) -> Path:
        return self.directory / f"{validate_request_id(request_id)}.jsonl"

    def create(self, request_id: str) -> Job:
        path = self._path(request_id)
        try:
            fd = self._create_file(path)
        except FileExistsError:
            raise JobExists(
                f"request id {request_id!r} was already used; fetch its reply with "
                f"GET /bridge/jobs/{request_id}"
            ) from None
        job = Job(request_id, path, fd)
        with self._lock:
            self._live[request_id] = job
        return job

    def _create_file(self, path: Path) -> int:
        """Create the log (never an existing one) and keep it open for the job's appends. The
        folder is made on the first miss, not checked on every request."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
        try:
            return os.open(path, flags, 0o600)
        except FileNotFoundError:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            return os.open(path, flags, 0o600)

    def finished(self, job: Job) -> None:
        job.close()
        with self._lock:
            self._live.pop(job.request_id, None)

    def read(self, request_id: str, since: int = 0) -> tuple[list[Event], bool]:
        """Events with ``seq > since``, and whether the job has ended. A running job is
        answered from memory, a finished one from disk (cached: finished logs never change)."""
        path = self._path(request_id)
        with self._lock:
            live = self._live.get(request_id)
            cached = self._finished_cache.get(request_id)
        if live is not None:
            everything = list(live.events)
        elif cached is not None:
            everything = cached
        else:
            everything = self._load(path, request_id)
        done = bool(everything) and everything[-1].get("type") in TERMINAL_TYPES
        # seq is 1-based and dense, so the events after ``since`` are a slice.
        return everything[since:] if since >= 0 else everything, done

    def _load(self, path: Path, request_id: str) -> list[Event]:
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise NotFound(f"no bridge job {request_id!r}", code="unknown_job") from None
        events = _parse(raw, path)
        if events and events[-1].get("type") in TERMINAL_TYPES:
            with self._lock:
                self._finished_cache[request_id] = events
                while len(self._finished_cache) > FINISHED_CACHE_SIZE:
                    self._finished_cache.popitem(last=False)
        return events

    def existing(self) -> list[Path]:
        """The job logs on disk now (taken before any new request is accepted)."""
        return sorted(self.directory.glob("*.jsonl")) if self.directory.exists() else []

    def interrupt_unfinished(self, paths: list[Path] | None = None) -> int:
        """Close the logs of requests a previous process left running: nobody will finish them,
        and a polling caller deserves an explicit error rather than silence. Only ``paths`` (by
        default, what is on disk now) are considered, so a request accepted meanwhile is safe."""
        count = 0
        for path in self.existing() if paths is None else paths:
            if _last_event_type(path) in TERMINAL_TYPES:
                continue
            job = Job(path.stem, path)
            job.events = _parse(path.read_text(encoding="utf-8", errors="replace"), path)
            job.append(
                "error",
                error="the agent restarted before this request finished",
                code="interrupted",
                requestId=path.stem,
            )
            count += 1
        return count

    def sweep(self, max_age_seconds: float) -> int:
        """Remove logs of finished requests older than ``max_age_seconds``."""
        cutoff = time.time() - max_age_seconds
        removed = 0
        with self._lock:
            live = set(self._live)
        for path in self.directory.glob("*.jsonl"):
            try:
                if path.stem not in live and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed


def _last_event_type(path: Path) -> str | None:
    """The type of a log's last event, reading only its tail (logs can be long)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    events = _parse(tail.splitlines()[-1] if tail.strip() else "", path)
    return str(events[-1].get("type")) if events else None


def _parse(raw: str, path: Path) -> list[Event]:
    events = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipping a torn line in %s", path)
            continue
        if isinstance(event, dict):
            events.append(event)
    return events

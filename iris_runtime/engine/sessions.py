"""Durable conversation logs: ``<channel>/log.jsonl``, one JSON object per line.

Every turn is appended (user message when its run starts, the reply when it ends) and flushed, so
the log survives a crash. The in-memory context of a channel is rebuilt from its log on first use,
which is how a restarted Iris remembers. A reset writes a marker instead of deleting anything.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from iris_runtime.engine.channels import resolve_channel_dir
from iris_runtime.engine.provider import Message, Usage
from iris_runtime.engine.usage import usage_from_json

log = logging.getLogger(__name__)

LOG_NAME = "log.jsonl"
MAX_CACHED_CHANNELS = 512
MAX_CONTEXT_MESSAGES = 400
_TEXT = operator.attrgetter("text")
_APPEND_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND  # read: the last byte, see _append


def _entry_to_message(entry: dict[str, Any]) -> Message | None:
    if entry.get("type") != "message" or entry.get("status") == "cancelled":
        return None
    role, text = entry.get("role"), entry.get("text")
    if role not in {"user", "assistant"} or not isinstance(text, str) or not text:
        return None
    return Message(role=role, text=text)


def text_chars(messages: Iterable[Message]) -> int:
    """The total length of the messages' texts (what token estimates are made from)."""
    return sum(map(len, map(_TEXT, messages)))


class History(list[Message]):
    """A channel's context, which also knows the total length of its texts: kept as messages
    come and go, so the compaction check on every message need not sum a long conversation."""

    chars: int

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        super().__init__(messages)
        self.chars = text_chars(self)

    def copy(self) -> History:
        twin = History.__new__(History)
        list.__init__(twin, self)
        twin.chars = self.chars
        return twin

    def add(self, message: Message, limit: int) -> None:
        """Append ``message``, then drop the oldest beyond ``limit``."""
        self.append(message)
        self.chars += len(message.text)
        excess = len(self) - limit
        if excess > 0:
            self.chars -= text_chars(self[:excess])
            del self[:excess]


SUMMARY_HEADER = "[Summary of the earlier conversation]"


def summary_messages(summary: str) -> list[Message]:
    """How a compaction summary sits in the context: a user turn and its acknowledgement, so
    the kept turns that follow still alternate roles."""
    return [
        Message("user", f"{SUMMARY_HEADER}\n{summary}"),
        Message("assistant", "Understood; I will continue from that summary."),
    ]


def _compaction_anchor(
    entry: dict[str, Any], messages: list[Message], anchors: dict[str, int]
) -> int:
    """Where the compacting run's own user message sits in ``messages``.

    A marker is logged during its run, after that run's user message, and ``kept`` counts turns
    from before that message. Markers name their run; older ones (written without ``runId``)
    follow their run's message directly, so a trailing user turn is that message."""
    run_id = entry.get("runId")
    if isinstance(run_id, str):
        return anchors.get(run_id, len(messages))
    if messages and messages[-1].role == "user":
        return len(messages) - 1
    return len(messages)


def _apply_compaction(
    entry: dict[str, Any], messages: list[Message], anchors: dict[str, int]
) -> list[Message]:
    at = _compaction_anchor(entry, messages, anchors)
    kept = entry.get("kept", 0)
    before, after = messages[:at], messages[at:]
    tail = before[-kept:] if isinstance(kept, int) and kept > 0 else []
    while tail and tail[0].role != "user":  # roles must still alternate after the summary
        tail = tail[1:]
    head = summary_messages(entry["summary"]) + tail
    for run_id, index in list(anchors.items()):
        if index >= at:
            anchors[run_id] = len(head) + index - at
        else:
            del anchors[run_id]
    return head + after


def replay(entries: list[dict[str, Any]]) -> list[Message]:
    """The context an entry list amounts to: messages, with compactions applied."""
    messages: list[Message] = []
    anchors: dict[str, int] = {}  # run id -> index of that run's user message
    for entry in entries:
        if entry.get("type") == "compaction" and isinstance(entry.get("summary"), str):
            messages = _apply_compaction(entry, messages, anchors)
            continue
        message = _entry_to_message(entry)
        if message is None:
            continue
        run_id = entry.get("runId")
        if message.role == "user" and isinstance(run_id, str):
            anchors[run_id] = len(messages)
        messages.append(message)
    return messages[-MAX_CONTEXT_MESSAGES:]


def since_last_reset(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries from the last reset marker on (all of them when there is none)."""
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].get("type") == "reset":
            return entries[index:]
    return entries


def usage_by_agent(entries: list[dict[str, Any]]) -> dict[str, Usage]:
    """Usage of the replies among ``entries``, summed per answering agent (``iris`` for Iris's
    own model, a sub-agent's name for replies it gave)."""
    totals: dict[str, Usage] = {}
    for entry in entries:
        if entry.get("type") == "message" and entry.get("role") == "assistant" and "usage" in entry:
            who = str(entry.get("agent") or "iris")
            totals[who] = totals.get(who, Usage()) + usage_from_json(entry["usage"])
    return totals


class SessionStore:
    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._channel_locks: dict[str, threading.Lock] = {}
        self._contexts: OrderedDict[str, History] = OrderedDict()
        # Each log's size right after our last append to it: a log still that size needs no
        # look at its last byte before the next one.
        self._sizes: OrderedDict[str, int] = OrderedDict()

    def log_path(self, channel: str) -> Path:
        return resolve_channel_dir(self._data_dir, channel) / LOG_NAME

    def _log_file(self, channel: str, *, create_dir: bool = False) -> str:
        # os.path, not pathlib: this runs on every append and a pathlib join costs more than it.
        return os.path.join(
            resolve_channel_dir(self._data_dir, channel, create=create_dir), LOG_NAME
        )

    def _channel_lock(self, channel: str) -> threading.Lock:
        with self._lock:
            return self._channel_locks.setdefault(channel, threading.Lock())

    # -- writing ------------------------------------------------------------------------------

    def _append(self, channel: str, entry: dict[str, Any]) -> None:
        """Append one line (the caller holds the channel's lock)."""
        entry = {"ts": round(time.time(), 6), **entry}
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            fd = os.open(self._log_file(channel), _APPEND_FLAGS, 0o600)
        except FileNotFoundError:  # the channel's first entry: its folder comes first
            fd = os.open(self._log_file(channel, create_dir=True), _APPEND_FLAGS, 0o600)
        try:
            size = os.fstat(fd).st_size
            # A crash mid-write can leave a torn last line; start ours on a fresh one. A file
            # still the size our own last line left it ends with that line's newline.
            if size and self._known_size(channel) != size and not _ends_with_newline(fd, size):
                line = "\n" + line
            data = line.encode("utf-8")
            written = os.write(fd, data)
        finally:
            os.close(fd)
        self._remember_size(channel, size + written if written == len(data) else None)

    def _known_size(self, channel: str) -> int | None:
        with self._lock:
            return self._sizes.get(channel)

    def _remember_size(self, channel: str, size: int | None) -> None:
        with self._lock:
            self._sizes.pop(channel, None)
            if size is not None:
                self._sizes[channel] = size
                while len(self._sizes) > MAX_CACHED_CHANNELS:
                    self._sizes.popitem(last=False)

    def append_message(self, channel: str, role: str, text: str, **extra: Any) -> None:
        entry = {"type": "message", "role": role, "text": text, **extra}
        with self._channel_lock(channel):
            self._append(channel, entry)
            context = self._cached(channel)
            message = _entry_to_message(entry)
            if context is not None and message is not None:
                context.add(message, MAX_CONTEXT_MESSAGES)

    def append_marker(self, channel: str, kind: str, **fields: Any) -> None:
        """A non-message entry (e.g. a delegated request's id): in the log, not in the context."""
        with self._channel_lock(channel):
            self._append(channel, {"type": kind, **fields})

    def reset(self, channel: str) -> None:
        with self._channel_lock(channel):
            self._append(channel, {"type": "reset"})
            self._store_context(channel, History())

    def forget(self, channel: str) -> None:
        """Drop what is cached about ``channel`` (its log was moved away: archived)."""
        with self._channel_lock(channel), self._lock:
            self._contexts.pop(channel, None)
            self._sizes.pop(channel, None)

    # -- reading ------------------------------------------------------------------------------

    def entries(self, channel: str, *, since_reset: bool = False) -> list[dict[str, Any]]:
        path = self._log_file(channel)
        out: list[dict[str, Any]] = []
        try:
            handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return []
        with handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    entry = json.loads(raw)
                except json.JSONDecodeError:
                    log.warning("skipping unreadable line %d of %s", number, path)
                    continue
                if isinstance(entry, dict):
                    out.append(entry)
        return since_last_reset(out) if since_reset else out

    def context(self, channel: str) -> History:
        """The conversation so far (since the last reset), replayed from disk on first use."""
        with self._channel_lock(channel):
            cached = self._cached(channel)
            if cached is None:
                cached = History(replay(self.entries(channel, since_reset=True)))
                self._store_context(channel, cached)
            return cached.copy()

    def compact(self, channel: str, summary: str, kept: int, run_id: str) -> None:
        """Replace the context before run ``run_id``'s user message, all but its last ``kept``
        messages, with ``summary``. The log gains a marker; nothing already written changes."""
        entry = {"type": "compaction", "summary": summary, "kept": kept, "runId": run_id}
        with self._channel_lock(channel):
            self._append(channel, entry)
            # Rebuilt from the log on next use, so the live context is exactly what a restarted
            # Iris replays (compaction is rare; one read of the log is cheap next to a summary).
            with self._lock:
                self._contexts.pop(channel, None)

    def _cached(self, channel: str) -> History | None:
        with self._lock:
            context = self._contexts.get(channel)
            if context is not None:
                self._contexts.move_to_end(channel)
            return context

    def _store_context(self, channel: str, messages: History) -> None:
        with self._lock:
            self._contexts[channel] = messages
            self._contexts.move_to_end(channel)
            while len(self._contexts) > MAX_CACHED_CHANNELS:
                self._contexts.popitem(last=False)


def _ends_with_newline(fd: int, size: int) -> bool:
    return os.pread(fd, 1, size - 1) == b"\n"

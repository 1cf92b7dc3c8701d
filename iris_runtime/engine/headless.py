"""Transports with no chat to post in: the bridge, editor (ACP) sessions, sub-agents' sessions.

:class:`HeadlessContext` is their reply context: everything the run says folds into one text; a
transport subclasses it and changes what it must (where status lines and files go).
:class:`HeadlessTransport` is what they share as transports: nothing to start, no directory.
:class:`PendingSinks` hands a run, when its context is made, what its submitter wants its live
output to reach (a status callback, an editor's stream)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from iris_runtime.engine.transport import ChannelInfo, ToolEvent, TransportEvent, UserInfo

Sink = TypeVar("Sink")
Result = TypeVar("Result")


class HeadlessContext:
    def __init__(self, transport_id: str, event: TransportEvent) -> None:
        self.transport_id = transport_id
        self.message = event
        self.channel_name: str | None = None
        self.channels: list[ChannelInfo] = []
        self.users: list[UserInfo] = []
        self.on_tool_event: Callable[[ToolEvent], None] | None = None
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = [text]

    def respond_in_thread(self, text: str) -> None:
        self.respond(text)

    def set_typing(self, is_typing: bool) -> None:
        return None

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        return None

    def set_working(self, working: bool) -> None:
        return None

    def delete_message(self) -> None:
        with self._lock:
            self._parts = []

    def accumulated_text(self) -> str:
        with self._lock:
            return "\n\n".join(self._parts)

    def set_status(self, text: str) -> None:
        return None


class HeadlessTransport:
    """The parts of the transport contract a headless transport answers the same way."""

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def channels(self) -> list[ChannelInfo]:
        return []

    def users(self) -> list[UserInfo]:
        return []


class PendingSinks(Generic[Sink]):
    """What a submitter wants a run's live output to reach (a status callback, an editor's
    stream), kept from ``submit`` until the engine makes the run's context.

    The value is stored before the engine is asked, because its worker may make the context
    before ``submit`` returns; it is dropped again if the submission is refused. The event is
    held with it, so a value is only ever handed to the very event it was given for."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[TransportEvent, Sink]] = {}
        self._lock = threading.Lock()

    def submit(self, event: TransportEvent, sink: Sink, do_submit: Callable[[], Result]) -> Result:
        with self._lock:
            self._pending[id(event)] = (event, sink)
        try:
            return do_submit()
        except Exception:
            self.take(event)
            raise

    def take(self, event: TransportEvent) -> Sink | None:
        with self._lock:
            entry = self._pending.pop(id(event), None)
        return entry[1] if entry is not None and entry[0] is event else None

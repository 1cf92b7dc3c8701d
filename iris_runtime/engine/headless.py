"""Transports with no chat to post in: the bridge, editor (ACP) sessions, sub-agents' sessions.

:class:`HeadlessContext` is their reply context: everything the run says folds into one text; a
transport subclasses it and changes what it must (where status lines and files go).
:class:`HeadlessTransport` is what they share as transports: nothing to start, no directory.
:class:`RunSinks` hands a run, when its context is made, what its submitter wants its live
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


class RunSinks(Generic[Sink]):
    """Per-submission values, keyed by the submitted event, taken once by ``create_context``.

    The engine makes a run's context on its worker, after ``submit`` returned; the value waits
    here until then, and is dropped again if the submission is refused."""

    def __init__(self) -> None:
        self._sinks: dict[int, Sink] = {}  # by id() of the event being submitted
        self._lock = threading.Lock()

    def submit(self, event: TransportEvent, sink: Sink, submit: Callable[[], Result]) -> Result:
        with self._lock:
            self._sinks[id(event)] = sink
        try:
            return submit()
        except Exception:
            self.take(event)
            raise

    def take(self, event: TransportEvent) -> Sink | None:
        with self._lock:
            return self._sinks.pop(id(event), None)

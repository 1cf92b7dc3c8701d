"""A reply context with no chat to post in: everything the run says folds into one text.

The headless bridge and background sub-agents' sessions both need one; a transport subclasses
it and changes what it must (where status lines and files go)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from iris_runtime.engine.transport import ChannelInfo, ToolEvent, TransportEvent, UserInfo


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

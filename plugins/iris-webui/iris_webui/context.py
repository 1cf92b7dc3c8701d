"""Reply plumbing for one run in one Web UI conversation (the engine's ``MessageContext``).

Everything a run says becomes frames for every socket open on its channel: ``reply`` (the whole
text so far, each time: a tab that joins late still shows it all), ``status``, ``tool`` cards and
``file`` offers. The final ``reply`` is not sent from here: the transport sends it when the run's
ticket resolves, because only then is the run's status (completed, stopped, error) known.

Tool cards and attached files are also written to the channel's log as markers (``webui_tool``,
``webui_file``), which the engine's replay ignores, so a reloaded page shows them again.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime.engine.sessions import SessionStore
from iris_runtime.engine.transport import ChannelInfo, ToolEvent, TransportEvent, UserInfo
from iris_webui.cards import tool_frame
from iris_webui.profile import TRANSPORT_ID
from iris_webui.uploads import FILES_DIR, file_url, safe_name, store_path

log = logging.getLogger(__name__)

Broadcast = Callable[[str, dict[str, Any]], int]


class WebContext:
    def __init__(
        self,
        broadcast: Broadcast,
        sessions: SessionStore,
        data_dir: Path,
        event: TransportEvent,
        *,
        is_event: bool,
        channel_name: str | None,
        channels: list[ChannelInfo],
        users: list[UserInfo],
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.transport_id = TRANSPORT_ID
        self.message = event
        self.channel_name = channel_name
        self.channels = channels
        self.users = users
        self.on_tool_event: Callable[[ToolEvent], None] | None = self._tool
        self.is_event = is_event
        self._broadcast = broadcast
        self._sessions = sessions
        self._data_dir = data_dir
        self._on_start = on_start
        self._parts: list[str] = []
        self._lock = threading.Lock()

    @property
    def channel(self) -> str:
        return self.message.channel

    def _send(self, frame: dict[str, Any]) -> None:
        self._broadcast(self.channel, frame)

    # -- what the run says ----------------------------------------------------------------------

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)
            whole = "\n\n".join(self._parts)
        self._send({"type": "reply", "text": whole, "final": False})

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = [text]
        self._send({"type": "reply", "text": text, "final": False})

    def respond_in_thread(self, text: str) -> None:
        # No threads in a browser chat: notes (failures) join the reply, like the bridge does.
        self.respond(text)

    def accumulated_text(self) -> str:
        with self._lock:
            return "\n\n".join(self._parts)

    # -- indicators -----------------------------------------------------------------------------

    def set_typing(self, is_typing: bool) -> None:
        pass  # the status frames are the "working" sign

    def set_working(self, working: bool) -> None:
        if working:
            if self._on_start is not None:
                self._on_start()
            self._send({"type": "status", "text": "Thinking…"})

    def set_status(self, text: str) -> None:
        self._send({"type": "status", "text": text})

    def delete_message(self) -> None:
        pass  # a silent run ends with an empty final reply, which the page does not show

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        """Copy the file into the channel's ``files`` folder (the only place downloads come
        from) and offer it."""
        source = Path(file_path)
        name = safe_name(title if title and "." in title else source.name)
        target = store_path(self._data_dir, self.channel, FILES_DIR, name)
        shutil.copyfile(source, target)
        relative = f"{FILES_DIR}/{target.name}"
        frame = {"type": "file", "name": name, "url": file_url(self.channel, relative)}
        self._sessions.append_marker(self.channel, "webui_file", name=name, path=relative)
        self._send(frame)

    def _tool(self, event: ToolEvent) -> None:
        frame = tool_frame(event)
        if event.phase == "end":
            card = {k: v for k, v in frame.items() if k not in {"type", "phase"}}
            try:
                self._sessions.append_marker(self.channel, "webui_tool", card=card)
            except OSError as exc:
                log.warning("could not log a tool card in %s: %s", self.channel, exc)
        self._send(frame)

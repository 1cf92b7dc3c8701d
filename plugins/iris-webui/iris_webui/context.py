"""Reply plumbing for one run in one Web UI conversation (the engine's ``MessageContext``).

Everything a run says becomes frames for every socket open on its channel: ``run`` (started),
``reply`` (the whole text so far, each time: a tab that joins late still shows it all),
``status``, ``tool`` cards and ``file`` offers, each with the run's number (``"run": N``,
increasing per channel), so the page puts every frame in its own turn even when a queued
message's echo and the previous run's last frames cross. The final ``reply`` is not sent from
here: the transport sends it when the run's ticket resolves, because only then is the run's
status (completed, stopped, error) known.

While the model writes, its text streams in too (the engine's optional ``on_text_delta``):
``reply`` frames with the text so far, at most one per ``STREAM_INTERVAL`` (the first of each
turn at once); the turn's ``respond`` then sends its exact text. Text that may still turn out to
begin with ``[SILENT]`` is held back, so a silent run never flashes its marker.

Tool cards and attached files are also written to the channel's log as markers (``webui_tool``,
``webui_file``), which the engine's replay ignores, so a reloaded page shows them again.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
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
STREAM_INTERVAL = 0.1  # seconds between two streamed reply frames of one run
SILENT_MARKER = "[SILENT]"


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
        run: int = 0,
        secrets: tuple[str, ...] = (),
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.transport_id = TRANSPORT_ID
        self.message = event
        self.channel_name = channel_name
        self.channels = channels
        self.users = users
        self.on_tool_event: Callable[[ToolEvent], None] | None = self._tool
        self.on_text_delta: Callable[[str], None] = self._delta
        self.is_event = is_event
        self._broadcast = broadcast
        self._sessions = sessions
        self._data_dir = data_dir
        self._on_start = on_start
        self.run = run
        self._secrets = secrets
        self._parts: list[str] = []
        self._streaming: list[str] = []  # the turn in progress, as it streams
        self._streamed_at: float | None = None  # when it was last shown (None: not this turn)
        self._shown = ""  # the text of the last reply frame sent
        self._lock = threading.Lock()

    @property
    def channel(self) -> str:
        return self.message.channel

    def _send(self, frame: dict[str, Any]) -> None:
        self._broadcast(self.channel, {**frame, "run": self.run})

    # -- what the run says ----------------------------------------------------------------------

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)
            self._end_turn()
        self._show()

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = [text]
            self._end_turn()
        self._show()

    def _show(self) -> None:
        """The reply so far, unless streaming already showed exactly that."""
        with self._lock:
            whole = "\n\n".join(self._parts)
            if whole == self._shown:
                return
            self._shown = whole
        self._send({"type": "reply", "text": whole, "final": False})

    def _delta(self, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._streaming.append(text)
            shown = self._streamed_at
            if shown is not None and now - shown < STREAM_INTERVAL:
                return  # the next delta, or the turn's respond, shows it
            turn = "".join(self._streaming).strip()
            if not turn or SILENT_MARKER.startswith(turn[: len(SILENT_MARKER)]):
                return  # (still) possibly a silent turn
            self._streamed_at = now
            whole = "\n\n".join([*self._parts, turn])
            self._shown = whole
        self._send({"type": "reply", "text": whole, "final": False})

    def _end_turn(self) -> None:
        # Called with the lock held: the turn's text has been delivered (or a tool runs next).
        self._streaming = []
        self._streamed_at = None

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
            self._send({"type": "run", "state": "started"})
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
        with self._lock:
            self._end_turn()  # a turn without text (or a silent one) ends in tool calls
        frame = tool_frame(event, self._secrets)
        if event.phase == "end":
            card = {k: v for k, v in frame.items() if k not in {"type", "phase"}}
            try:
                self._sessions.append_marker(self.channel, "webui_tool", card=card)
            except OSError as exc:
                log.warning("could not log a tool card in %s: %s", self.channel, exc)
        self._send(frame)

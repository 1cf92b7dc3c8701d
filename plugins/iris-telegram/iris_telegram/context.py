"""Reply plumbing for one run in one Telegram chat (the engine's ``MessageContext``).

A live message gets a "Thinking…" placeholder, anchored to it (and in its forum topic). Progress
lines edit the placeholder, at most once per edit interval per chat, on a timer thread (never on
the run's thread: progress must not hold up the run): a line that arrives too soon waits, and
only the latest waiting line is shown. The final reply waits for a progress edit in flight, so it
is never overwritten by one. When the run ends the placeholder is replaced
by the reply's first chunk and the other chunks follow; supplementary notes (failures) follow as
replies to the user's message. A synthetic event (API, scheduled) has no placeholder: its reply,
if any, is posted as new messages.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from iris_runtime.engine.transport import ChannelInfo, ToolEvent, TransportEvent, UserInfo
from iris_telegram.api import TelegramError
from iris_telegram.markup import escape
from iris_telegram.profile import TRANSPORT_ID
from iris_telegram.sender import ChatSender, Target

log = logging.getLogger(__name__)

PLACEHOLDER = "<i>Thinking…</i>"
STOPPED = "(stopped)"
NO_REPLY = "(no reply)"


class TelegramContext:
    def __init__(
        self,
        sender: ChatSender,
        event: TransportEvent,
        target: Target,
        *,
        is_event: bool,
        channel_name: str | None,
        channels: list[ChannelInfo],
        users: list[UserInfo],
        placeholder: int | None = None,  # a "Queued…" message posted while it waited
        on_finish: Callable[[TelegramContext], None] | None = None,
    ) -> None:
        self.transport_id = TRANSPORT_ID
        self.message = event
        self.channel_name = channel_name
        self.channels = channels
        self.users = users
        self.on_tool_event: Callable[[ToolEvent], None] | None = None
        self._sender = sender
        self._target = target
        self._is_event = is_event
        self._on_finish = on_finish
        self._stop_requested = False  # /stop was sent for this run (not a later one)
        self._edit_lock = threading.Lock()  # held while a progress edit is on the wire
        self._parts: list[str] = []
        self._notes: list[str] = []
        self._placeholder = placeholder
        self._pending_status: str | None = None
        self._timer: threading.Timer | None = None
        self._finished = False
        self._lock = threading.RLock()

    # -- what the run says ----------------------------------------------------------------------

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = [text]

    def respond_in_thread(self, text: str) -> None:
        with self._lock:
            self._notes.append(text)

    def accumulated_text(self) -> str:
        with self._lock:
            return "\n\n".join(self._parts)

    # -- indicators -----------------------------------------------------------------------------

    def set_typing(self, is_typing: bool) -> None:
        if is_typing:
            self._sender.typing(self._target)

    def set_working(self, working: bool) -> None:
        if working:
            self._start()
        else:
            self._finish()

    def set_status(self, text: str) -> None:
        with self._lock:
            if self._is_event or self._finished or self._placeholder is None:
                return
            self._pending_status = text
            if self._timer is None:  # else an edit is already due: it will show the latest line
                self._schedule(0.0)

    def mark_stopped(self) -> None:
        """/stop was sent while this run was running (a mark for this run only)."""
        with self._lock:
            self._stop_requested = True

    def delete_message(self) -> None:
        with self._lock:
            placeholder, self._placeholder = self._placeholder, None
            self._pending_status = None
        if placeholder is not None:
            self._sender.delete(self._target, placeholder)

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        self._sender.send_document(self._target, Path(file_path), title)

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._is_event:
            return
        if self._placeholder is not None:  # it waited in the queue: "Queued…" → "Thinking…"
            self.set_status("Thinking…")
            return
        # The placeholder is the "working" sign: a typing action as well would only cost a call.
        try:
            placeholder = self._sender.send_html(self._target, PLACEHOLDER)
        except TelegramError as exc:
            log.warning("could not post a placeholder in %s: %s", self.message.channel, exc)
            return
        with self._lock:
            if self._finished:
                return
            self._placeholder = placeholder

    def _schedule(self, delay: float) -> None:
        # Called with self._lock held.
        self._timer = threading.Timer(delay, self._flush_status)
        self._timer.daemon = True
        self._timer.start()

    def _flush_status(self) -> None:
        """On the timer's thread: show the latest status line, if the slot is free."""
        with self._edit_lock:
            with self._lock:
                self._timer = None
                text, placeholder = self._pending_status, self._placeholder
                if self._finished or text is None or placeholder is None:
                    return
                self._pending_status = None
            try:
                wait = self._sender.try_edit(self._target, placeholder, f"<i>{escape(text)}</i>")
            except TelegramError as exc:
                log.warning("could not show progress in %s: %s", self.message.channel, exc)
                return
        with self._lock:
            if wait > 0:
                if self._pending_status is None:
                    self._pending_status = text
                if self._timer is None and not self._finished:
                    self._schedule(wait)

    def _finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            text = "\n\n".join(self._parts).strip()
            notes = [n for n in self._notes if n.strip()]
            placeholder = self._placeholder
            stopped = self._stop_requested
        try:
            with self._edit_lock:  # a progress edit on the wire lands before the reply
                self._deliver(text, notes, placeholder, stopped)
        except Exception as exc:
            # The reply is in the channel's log (the engine wrote it); say why it is not in the
            # chat, without the token (errors from the API client never carry it).
            log.error(
                "could not deliver the reply in %s after retrying: %s",
                self.message.channel,
                exc if isinstance(exc, TelegramError) else f"{type(exc).__name__}: {exc}",
            )
        finally:
            if self._on_finish is not None:
                self._on_finish(self)

    def _deliver(self, text: str, notes: list[str], placeholder: int | None, stopped: bool) -> None:
        # A reply that renders to nothing (an empty code block, a lone "> ") posts no message:
        # the placeholder is still there and gets the fallback below.
        if text and self._sender.deliver(self._target, text, placeholder=placeholder):
            placeholder = None
        for note in notes:
            if self._sender.deliver(self._target, note, placeholder=placeholder):
                placeholder = None
        if placeholder is not None:
            # Nothing to say and nothing dropped the placeholder: do not leave "Thinking…".
            final = STOPPED if stopped else NO_REPLY
            self._sender.deliver(self._target, final, placeholder=placeholder)

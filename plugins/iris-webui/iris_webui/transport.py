"""WebTransport: Iris in the browser, one ``WEBUI-<id>`` channel per conversation.

Messages arrive on a conversation's WebSocket (see ``routes``) and are handed to the engine like
any transport's (``engine.submit``: one run per channel, five waiting); Stop goes to
``engine.handle_stop``. Everything a run produces is broadcast to every socket open on the
channel, so two tabs on one conversation both follow it. The final reply is sent when the run's
ticket resolves, with the run's status.

A socket opened with ``?agent=NAME`` pins its messages to that sub-agent: the
:class:`~iris_webui.routing.PinnedAgentRouter` answers them through the bridge, and Iris's own
model is never called.

The transport is registered like any other (not as a fallback), so it is consulted before the
headless bridge: a channel-addressed API event or a scheduled event for a ``WEBUI-*`` channel
reaches the browser.

Background sub-agents (spec 001): their steps arrive through ``on_channel_event`` and become
live cards (:mod:`iris_webui.subagents`); their announce, which the engine logs itself, is shown
with ``show_logged_message``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from typing import Any

from iris_runtime.engine.channels import resolve_channel_path
from iris_runtime.engine.core import Engine
from iris_runtime.engine.runs import RunResult, RunTicket
from iris_runtime.engine.transport import (
    Attachment,
    ChannelInfo,
    ChannelState,
    TransportEvent,
    UserInfo,
)
from iris_runtime.errors import InvalidInput, NotFound, QueueFull
from iris_webui.auth import LoginSessions, PasswordGate
from iris_webui.config import WebConfig
from iris_webui.context import WebContext
from iris_webui.history import LOGGED_ID as _LOGGED_ID
from iris_webui.history import is_logged_post, list_sessions, logged_post_id
from iris_webui.hub import Client, Hub
from iris_webui.profile import TRANSPORT_ID, WEBUI_PROFILE
from iris_webui.subagents import FRAME_TYPE, subagent_card
from iris_webui.subagents import MARKER as SUBAGENT_MARKER
from iris_webui.uploads import (
    ATTACHMENTS_DIR,
    attachment_name,
    channel_of,
    file_url,
    session_of,
)

log = logging.getLogger(__name__)

SHUTDOWN_WATCH = "webui:shutdown"  # an observer key no channel can have (':' is not allowed)
USER = "webui"
STATUSES = {"done": "completed", "stopped": "stopped"}
_POST_ID = "post-"


class WebTransport:
    transport_id = TRANSPORT_ID
    prompt_profile = WEBUI_PROFILE
    stop_command_hint = "the Stop button"

    def __init__(self, engine: Engine, config: WebConfig) -> None:
        self.engine = engine
        self.config = config
        self.hub = Hub()
        self.logins = LoginSessions(config.data_dir)
        self.password = PasswordGate(config.password)
        self._lock = threading.Lock()
        self._pinned: dict[tuple[str, str], str] = {}  # (channel, ts) -> the agent it goes to
        self._queued: dict[str, set[str]] = {}  # channel -> ts of messages waiting for a run
        self._channel_locks: dict[str, threading.Lock] = {}
        self._ts = itertools.count()
        self._runs: dict[str, int] = {}  # channel -> the number of its latest run
        self._run_of: dict[tuple[str, str], int] = {}  # (channel, ts) -> its run's number
        self._watch: int | None = None

    def __repr__(self) -> str:
        return f"WebTransport(port={self.config.port})"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        # The engine tells its watchers when shutdown begins (on SIGTERM, before gunicorn waits
        # for open connections): our sockets are closed then, instead of holding the worker up
        # for its whole grace period.
        self._watch = self.engine.observers.register(SHUTDOWN_WATCH, self._watcher)

    def _watcher(self, event: dict[str, Any]) -> None:
        if event.get("type") == "closed":
            self.hub.close_all()

    def stop(self) -> None:
        self.hub.close_all()

    # -- the contract ---------------------------------------------------------------------------

    def owns_channel(self, channel_id: str) -> bool:
        return session_of(channel_id) is not None

    def channels(self) -> list[ChannelInfo]:
        return [
            ChannelInfo(channel_of(s["id"]), s["title"] or "(new conversation)")
            for s in list_sessions(self.config.data_dir)
        ]

    def users(self) -> list[UserInfo]:
        return []  # one person, the operator: nobody to list

    def post_message(self, channel_id: str, text: str) -> str:
        """A message from outside a run (an escalation, say): shown and kept in the history."""
        self._check(channel_id)
        message_id = _POST_ID + uuid.uuid4().hex[:16]
        self.engine.sessions.append_marker(channel_id, "webui_post", id=message_id, text=text)
        self.hub.broadcast(channel_id, {"type": "post", "id": message_id, "text": text})
        return message_id

    def show_logged_message(self, channel_id: str, text: str, thread: str | None) -> str:
        """A message the engine has already logged as the assistant's (a sub-agent's announce):
        shown live on the conversation's open sockets as a ``post`` frame, and nothing added to
        the log (the history shows it from the engine's own entry). Its id is the one the
        history gives that entry, so a tab that reloads meanwhile does not show it twice. A
        browser conversation has no threads: ``thread`` is ignored."""
        self._check(channel_id)
        entries = self.engine.sessions.entries(channel_id)
        found = next(
            (
                (index, entry)
                for index, entry in reversed(list(enumerate(entries)))
                if is_logged_post(entry) and entry.get("text") == text
            ),
            None,
        )
        frame: dict[str, Any] = {"type": "post", "text": text, "posted": True}
        if found is None:  # not logged after all: shown all the same, under an id of its own
            log.warning("a message shown in %s is not in its log", channel_id)
            frame["id"] = _LOGGED_ID + uuid.uuid4().hex[:16]
        else:
            index, entry = found
            frame["id"] = logged_post_id(entry, index)
            if isinstance(entry.get("agent"), str):
                frame["agent"] = entry["agent"]
        self.hub.broadcast(channel_id, frame)
        return str(frame["id"])

    def on_channel_event(self, channel_id: str, event: dict[str, Any]) -> None:
        """Something outside a run: a background sub-agent spawned from this conversation, or a
        later step of it. Kept in the log as a ``webui_subagent`` marker (a reloaded page draws
        the card again) and sent to the open sockets as a ``subagent`` frame. Other events, and
        sub-agent events without a run id, are ignored."""
        if session_of(channel_id) is None or not isinstance(event, dict):
            return
        if event.get("type") != FRAME_TYPE:
            return
        card = subagent_card(event)
        if card is None:
            log.warning("ignoring a sub-agent event without a run id in %s", channel_id)
            return
        try:
            self.engine.sessions.append_marker(channel_id, SUBAGENT_MARKER, card=card)
        except OSError as exc:
            log.warning("could not log a sub-agent card in %s: %s", channel_id, exc)
        self.hub.broadcast(channel_id, {"type": FRAME_TYPE, **card, "serverTime": time.time()})

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        self._check(channel_id)
        if not message_id.startswith(_POST_ID) or len(message_id) > 64:
            raise InvalidInput(
                f"{message_id[:40]!r} is not a Web UI message id", code="invalid_message_id"
            )
        self.engine.sessions.append_marker(channel_id, "webui_post", id=message_id, text=text)
        self.hub.broadcast(channel_id, {"type": "post", "id": message_id, "text": text})

    def enqueue_event(self, event: TransportEvent) -> bool:
        """A synthetic event (API, scheduled) for a conversation; False when its queue is full.
        Open sockets see it (a ``user`` frame marked ``event``) and its run like any other."""
        self._check(event.channel)
        with self._channel_lock(event.channel):
            will_wait = self.engine.is_running(event.channel)
            ticket = self.engine.submit_event(self, event)
            if ticket is None:
                return False
            echo: dict[str, Any] = {"type": "user", "text": event.text, "files": [], "event": True}
            if will_wait:
                echo["queued"] = True
            self.hub.broadcast(event.channel, echo)
        self._follow(event.channel, event.ts, ticket)
        return True

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> WebContext:
        channel = self._check(event.channel)
        with self._lock:
            waiting = self._queued.get(channel)
            if waiting is not None:
                waiting.discard(event.ts)
                if not waiting:
                    del self._queued[channel]
            run = self._runs.get(channel, 0) + 1
            self._runs[channel] = run
            self._run_of[(channel, event.ts)] = run
        channels = self.channels()
        name = next((c.name for c in channels if c.id == channel), None)
        return WebContext(
            self.hub.broadcast,
            self.engine.sessions,
            self.config.data_dir,
            event,
            is_event=is_event,
            channel_name=name,
            channels=channels,
            users=[],
            run=run,
            secrets=self.config.secrets,
            on_start=lambda: self._after_echo(channel),
        )

    # -- from the sockets -----------------------------------------------------------------------

    def pinned_agent(self, channel: str, ts: str) -> str | None:
        """The sub-agent a message was sent to with ``?agent=`` (asked once, by the router)."""
        with self._lock:
            return self._pinned.pop((channel, ts), None)

    def submit_message(self, client: Client, text: str, files: list[str]) -> None:
        channel = client.channel
        attachments = tuple(self._attachment(channel, f) for f in files)
        ts = f"{time.time():.6f}-{next(self._ts)}"  # unique: the pinned agent is keyed by it
        event = TransportEvent(
            channel=channel,
            text=text,
            user=USER,
            user_name="Web UI",
            ts=ts,
            attachments=attachments,
        )
        echo: dict[str, Any] = {
            "type": "user",
            "text": text,
            "files": [{"name": a.name, "url": _url_of(a)} for a in attachments],
        }
        with self._channel_lock(channel):
            if client.agent is not None:
                with self._lock:
                    self._pinned[(channel, ts)] = client.agent
            will_wait = self.engine.is_running(channel)
            try:
                ticket = self.engine.submit(self, event)
            except QueueFull:
                with self._lock:
                    self._pinned.pop((channel, ts), None)
                client.send(
                    {
                        "type": "error",
                        "code": "queue_full",
                        "message": "Iris is busy here and 5 messages are already waiting; "
                        "send it again once she has answered.",
                    }
                )
                return
            if will_wait:
                echo["queued"] = True
            self.hub.broadcast(channel, echo)
            if will_wait:
                with self._lock:
                    waiting = self._queued.setdefault(channel, set())
                    waiting.add(ts)
                    position = len(waiting)
                self.hub.broadcast(channel, {"type": "queued", "position": position})
        self._follow(channel, ts, ticket)

    def stop_run(self, channel: str) -> bool:
        return self.engine.handle_stop(channel)

    # -- helpers --------------------------------------------------------------------------------

    def _follow(self, channel: str, ts: str, ticket: RunTicket) -> None:
        ticket.add_done_callback(lambda result: self._finished(channel, ts, result))

    def _finished(self, channel: str, ts: str, result: RunResult) -> None:
        status = STATUSES.get(result.status, "error")
        with self._lock:
            run = self._run_of.pop((channel, ts), None)
            if run is None:  # ended before it started (refused, or Iris stopping): a number still
                run = self._runs.get(channel, 0) + 1
                self._runs[channel] = run
        if result.error_code == "route_failed":
            # The bridge's own words (the agent is down, refused, timed out): shown as an error.
            self.hub.broadcast(
                channel,
                {
                    "type": "error",
                    "code": "agent_unreachable",
                    "message": result.error or "",
                    "run": run,
                },
            )
        frame: dict[str, Any] = {
            "type": "reply",
            "text": result.text,
            "final": True,
            "status": status,
            "run": run,
        }
        if result.agent:
            frame["agent"] = result.agent
        self.hub.broadcast(channel, frame)

    def _attachment(self, channel: str, path: str) -> Attachment:
        """An uploaded file named by the ``path`` the upload returned (``attachments/<name>``)."""
        folder, _, stored = path.partition("/")
        if folder != ATTACHMENTS_DIR or not stored or "/" in stored:
            raise InvalidInput(f"unknown upload {path[:80]!r}", code="unknown_attachment")
        try:
            full = resolve_channel_path(self.config.data_dir, channel, folder, stored)
        except InvalidInput:
            raise InvalidInput(f"unknown upload {path[:80]!r}", code="unknown_attachment") from None
        if not full.is_file():
            raise InvalidInput(f"unknown upload {path[:80]!r}", code="unknown_attachment")
        return Attachment(local=f"{channel}/{folder}/{stored}", name=attachment_name(stored))

    def _channel_lock(self, channel: str) -> threading.Lock:
        with self._lock:
            return self._channel_locks.setdefault(channel, threading.Lock())

    def _after_echo(self, channel: str) -> None:
        """Wait until the message that started this run has been echoed (its sender holds the
        channel's lock from ``submit`` to the echo), so no tab sees a reply before its question."""
        with self._channel_lock(channel):
            pass

    @staticmethod
    def _check(channel: str) -> str:
        if session_of(channel) is None:
            raise NotFound(
                f"{channel[:80]!r} is not a Web UI channel (WEBUI-<id>)", code="no_transport"
            )
        return channel


def _url_of(attachment: Attachment) -> str:
    channel, _, relative = attachment.local.partition("/")
    return file_url(channel, relative)

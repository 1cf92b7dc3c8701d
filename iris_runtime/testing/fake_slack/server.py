"""The fake Slack server: Web API methods over HTTP and the Socket Mode WebSocket, on loopback.

One ``ThreadingHTTPServer`` on a free 127.0.0.1 port serves

- ``/api/<method>`` — the Web API methods a bot uses (query string, form or JSON parameters;
  token from the ``Authorization`` header or a ``token`` parameter; ``{"ok": …}`` JSON answers,
  HTTP 429 with ``Retry-After`` for ``ratelimited``);
- ``/link/?ticket=…`` — the Socket Mode WebSocket handed out by ``apps.connections.open``: a
  ``hello`` on connect, ``events_api`` envelopes that must be acknowledged with their
  ``envelope_id``, pings answered, ``disconnect`` requests and dropped connections on demand
  (unacknowledged envelopes are delivered again, ``retry_attempt`` counted up, like Slack does);
- ``/upload/v1/<file id>`` — the upload URLs of ``files.getUploadURLExternal``;
- ``/files-pri/<file id>/<name>`` — file downloads (``url_private``), bot token required.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import parse_qsl, urlsplit

from iris_runtime.testing.fake_slack import websocket as ws
from iris_runtime.testing.fake_slack.workspace import (
    ApiCall,
    ApiError,
    ApplyThenDrop,
    Clock,
    Conversation,
    DropConnection,
    Edit,
    Fault,
    HttpFailure,
    Message,
    RateLimited,
    StoredFile,
    User,
)
from iris_runtime.testing.loopback_http import LoopbackHTTPService, TrackingHTTPServer

FAKE_BOT_TOKEN = "xoxb-fake-bot-token"  # noqa: S105 (fake credentials for tests)
FAKE_APP_TOKEN = "xapp-fake-app-token"  # noqa: S105
# Slack truncates text past 40,000 characters; tests lower this to provoke msg_too_long.
DEFAULT_MAX_TEXT = 40_000

T = TypeVar("T")

# Methods that need the app-level token; every other method needs the bot token.
_APP_METHODS = {"apps.connections.open"}


class _Abort(Exception):
    """Unwinds a request whose connection must be dropped."""


class _Socket:
    """One Socket Mode connection."""

    def __init__(self, connection: socket.socket, number: int) -> None:
        self.connection = connection
        self.number = number
        self.lock = threading.Lock()
        self.in_flight: dict[str, dict[str, Any]] = {}
        self.closed = False

    def send_text(self, payload: Any) -> None:
        frame = ws.encode_frame(ws.OP_TEXT, json.dumps(payload).encode("utf-8"))
        self.send_raw(frame)

    def send_raw(self, frame: bytes) -> None:
        with self.lock:
            if self.closed:
                raise OSError("socket closed")
            self.connection.sendall(frame)

    def kill(self) -> None:
        with self.lock:
            self.closed = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class FakeSlack:
    """A Slack workspace with one bot, for the real ``slack_sdk`` to talk to.

    Seeded with users ``UANA00001`` (ana) and ``UBEN00002`` (ben), channels ``CGENERAL1``
    (#general) and ``CRANDOM02`` (#random) with the bot in them, ``CLEFT0003`` (#left) without
    it, and a direct message ``DANA00001`` with ana. Point the client at :attr:`api_url` with
    :attr:`bot_token` and :attr:`app_token`.
    """

    def __init__(
        self,
        *,
        bot_token: str = FAKE_BOT_TOKEN,
        app_token: str = FAKE_APP_TOKEN,
        team_id: str = "TFAKE0001",
        bot_user_id: str = "UBOT00001",
        bot_id: str = "BBOT00001",
        bot_name: str = "iris",
        max_text_length: int = DEFAULT_MAX_TEXT,
        page_size: int = 100,
        echo_bot_messages: bool = True,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.max_text_length = max_text_length
        self.page_size = page_size
        self.echo_bot_messages = echo_bot_messages
        self.errors: list[str] = []
        """Tracebacks of bugs inside the fake itself (a test may assert it stays empty)."""
        self.acks: list[str] = []
        """Envelope ids the client acknowledged, in order."""
        self.connections_opened = 0
        self._cond = threading.Condition()
        self._clock = Clock()
        self._calls: list[ApiCall] = []
        self._faults: dict[str, deque[Fault]] = {}
        self._users: dict[str, User] = {}
        self._conversations: dict[str, Conversation] = {}
        self._messages: list[Message] = []
        self._files: dict[str, StoredFile] = {}
        self._downloads: list[str] = []
        self._tickets: set[str] = set()
        self._sockets: list[_Socket] = []
        self._outbox: deque[dict[str, Any]] = deque()
        self._ids = iter(range(1, 1 << 62))
        self._service = LoopbackHTTPService(self, _Handler, name="FakeSlack")
        self.add_user(bot_user_id, bot_name, is_bot=True)
        self.add_user("UANA00001", "ana", "Ana Lima")
        self.add_user("UBEN00002", "ben", "Ben Okafor")
        self.add_channel("CGENERAL1", "general")
        self.add_channel("CRANDOM02", "random")
        self.add_channel("CLEFT0003", "left", member=False)
        self.add_dm("DANA00001", "UANA00001")

    # --- workspace ---------------------------------------------------------------------------

    def add_user(
        self, user_id: str, name: str, real_name: str = "", *, is_bot: bool = False
    ) -> User:
        with self._cond:
            user = self._users[user_id] = User(user_id, name, real_name, is_bot)
            return user

    def add_channel(
        self, channel_id: str, name: str, *, member: bool = True, private: bool = False
    ) -> Conversation:
        with self._cond:
            conv = Conversation(channel_id, name, is_member=member, is_private=private)
            self._conversations[channel_id] = conv
            return conv

    def add_dm(self, channel_id: str, user_id: str) -> Conversation:
        with self._cond:
            conv = Conversation(channel_id, "", is_member=True, is_im=True, user=user_id)
            self._conversations[channel_id] = conv
            return conv

    def set_member(self, channel_id: str, member: bool) -> None:
        """The bot joins or leaves a channel (no event is sent; see :meth:`send_event`)."""
        with self._cond:
            self._conversations[channel_id].is_member = member

    def add_file(self, name: str, content: bytes, mimetype: str = "text/plain") -> dict[str, Any]:
        """A file a person shared; returns the file object to put in a message's ``files``."""
        with self._cond:
            stored = StoredFile(self._new_id("F"), name, content, mimetype)
            self._files[stored.id] = stored
        return stored.as_json(self.base_url)

    # --- driving the bot (events over Socket Mode) --------------------------------------------

    def mention(
        self,
        channel: str,
        text: str,
        *,
        user: str = "UANA00001",
        thread_ts: str | None = None,
        files: Iterable[dict[str, Any]] = (),
    ) -> str:
        """A person writes ``@iris text`` in ``channel``: a ``message`` and an ``app_mention``
        event, as Slack sends both. Returns the message's ``ts``."""
        return self.user_message(
            channel, f"<@{self.bot_user_id}> {text}", user=user, thread_ts=thread_ts, files=files
        )

    def dm(
        self,
        text: str,
        *,
        user: str = "UANA00001",
        thread_ts: str | None = None,
        files: Iterable[dict[str, Any]] = (),
    ) -> str:
        """A person writes to the bot in their direct message (created if needed)."""
        with self._cond:
            found = [c for c in self._conversations.values() if c.is_im and c.user == user]
        channel = found[0].id if found else self.add_dm(self._new_id("D"), user).id
        return self.user_message(channel, text, user=user, thread_ts=thread_ts, files=files)

    def user_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "UANA00001",
        thread_ts: str | None = None,
        files: Iterable[dict[str, Any]] = (),
    ) -> str:
        """A person posts ``text`` (raw Slack markup) in ``channel``; the events follow."""
        files = list(files)
        with self._cond:
            conv = self._conversations.get(channel)
            channel_type = conv.channel_type if conv else "channel"
            ts = self._clock.next_ts()
            self._messages.append(Message(channel, ts, text, user, False, thread_ts, files))
            self._cond.notify_all()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "team": self.team_id,
            "channel_type": channel_type,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event["files"] = files
            event["subtype"] = "file_share"
        self.send_event(event)
        if f"<@{self.bot_user_id}>" in text and channel_type != "im":
            mention = {k: v for k, v in event.items() if k not in {"channel_type", "subtype"}}
            mention["type"] = "app_mention"
            self.send_event(mention)
        return ts

    def send_event(self, event: dict[str, Any], *, event_id: str | None = None) -> str:
        """Deliver an Events API event over Socket Mode; returns its envelope id. Queued until a
        connection is open, and delivered again if the connection drops before it is acked.
        Passing an earlier ``event_id`` sends a duplicate, as Slack sometimes does."""
        envelope_id = f"env-{secrets.token_hex(8)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": {
                "token": "verification-token-unused",
                "team_id": self.team_id,
                "api_app_id": "AFAKE0001",
                "event": event,
                "type": "event_callback",
                "event_id": event_id or self._new_id("Ev"),
                "event_time": int(time.time()),
                "authorizations": [
                    {"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}
                ],
            },
        }
        with self._cond:
            self._outbox.append(envelope)
        self._pump()
        return envelope_id

    def request_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask every connected client to reconnect (Slack's ``disconnect`` message)."""
        for sock in self._live_sockets():
            with contextlib.suppress(OSError):
                sock.send_text({"type": "disconnect", "reason": reason, "debug_info": {}})

    def drop_connections(self) -> None:
        """Cut every Socket Mode connection without a close frame (a network failure)."""
        for sock in self._live_sockets():
            sock.kill()

    # --- faults ------------------------------------------------------------------------------

    def inject(self, method: str, *faults: Fault) -> None:
        """Answer the next calls of ``method`` with these faults, one per call, in order."""
        with self._cond:
            self._faults.setdefault(method, deque()).extend(faults)

    def pending_faults(self, method: str) -> int:
        with self._cond:
            return len(self._faults.get(method, ()))

    # --- what happened -----------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[ApiCall]:
        with self._cond:
            return [c for c in self._calls if method is None or c.method == method]

    def messages(self, channel: str | None = None, *, bot: bool | None = None) -> list[Message]:
        """Messages in ``channel`` (all channels by default), oldest first."""
        with self._cond:
            return [
                m
                for m in self._messages
                if (channel is None or m.channel == channel) and (bot is None or m.bot == bot)
            ]

    def bot_messages(self, channel: str | None = None) -> list[Message]:
        return self.messages(channel, bot=True)

    def message(self, channel: str, ts: str) -> Message:
        with self._cond:
            for m in self._messages:
                if m.channel == channel and m.ts == ts:
                    return m
        raise KeyError(f"no message {ts} in {channel}")

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The replies in a thread (not its parent), oldest first."""
        return [m for m in self.messages(channel) if m.thread_ts == thread_ts and m.ts != thread_ts]

    def uploaded_files(self) -> list[StoredFile]:
        with self._cond:
            return [f for f in self._files.values() if f.uploaded]

    @property
    def downloads(self) -> list[str]:
        """Ids of files the client downloaded (with a valid bot token)."""
        with self._cond:
            return list(self._downloads)

    @property
    def connected(self) -> int:
        """How many Socket Mode connections are open now."""
        return len(self._live_sockets())

    def wait_for(self, predicate: Callable[[FakeSlack], T], what: str, timeout: float = 30.0) -> T:
        """Wait until ``predicate(self)`` is truthy and return its value; fail after ``timeout``
        seconds, naming ``what`` was awaited."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate(self)
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"fake Slack: timed out after {timeout}s waiting for {what}"
                    )
                self._cond.wait(min(remaining, 0.1))

    def wait_connected(self, timeout: float = 30.0) -> None:
        self.wait_for(lambda f: f.connected, "a Socket Mode connection", timeout)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._service.port

    @property
    def base_url(self) -> str:
        return self._service.base_url

    @property
    def api_url(self) -> str:
        """What to pass as ``WebClient(base_url=...)``."""
        return f"{self.base_url}/api/"

    def iris_env(self) -> dict[str, str]:
        """Environment for an Iris with the Slack plugin installed, pointed at this fake."""
        return {
            "IRIS_SLACK_APP_TOKEN": self.app_token,
            "IRIS_SLACK_BOT_TOKEN": self.bot_token,
            "IRIS_SLACK_API_URL": self.api_url,
        }

    def start(self) -> Self:
        self._service.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._service.running:
            for sock in self._live_sockets():
                sock.kill()
        self._service.stop(timeout, raise_if_stuck=False)

    def __enter__(self) -> Self:
        if not self._service.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ---------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        with self._cond:
            return f"{prefix}{next(self._ids):08d}"

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _live_sockets(self) -> list[_Socket]:
        with self._cond:
            return [s for s in self._sockets if not s.closed]

    def _pump(self) -> None:
        """Send queued envelopes over the newest open connection."""
        while True:
            with self._cond:
                live = [s for s in self._sockets if not s.closed]
                if not live or not self._outbox:
                    return
                target = live[-1]
                envelope = self._outbox.popleft()
                target.in_flight[envelope["envelope_id"]] = envelope
            try:
                target.send_text(envelope)
            except OSError:
                self._socket_closed(target)

    def _socket_closed(self, sock: _Socket) -> None:
        with self._cond:
            sock.closed = True
            if sock in self._sockets:
                self._sockets.remove(sock)
            # Slack delivers unacknowledged events again, counting the attempts.
            for envelope in sock.in_flight.values():
                envelope["retry_attempt"] += 1
                envelope["retry_reason"] = "timeout"
                self._outbox.appendleft(envelope)
            sock.in_flight.clear()
            self._cond.notify_all()

    def _take_fault(self, method: str) -> Fault | None:
        with self._cond:
            queue = self._faults.get(method)
            return queue.popleft() if queue else None

    def _record(self, call: ApiCall) -> None:
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()

    # --- HTTP: the Web API -------------------------------------------------------------------

    def _api(self, handler: _Handler, method: str, params: dict[str, Any]) -> None:
        token = params.pop("token", None)
        header = handler.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header[len("Bearer ") :]
        expected = self.app_token if method in _APP_METHODS else self.bot_token
        if token is None:
            auth = "none"
        elif token == expected:
            auth = "app" if method in _APP_METHODS else "bot"
        else:
            auth = "invalid"
        now = time.monotonic()
        fault = self._take_fault(method)
        if isinstance(fault, DropConnection):
            self._record(ApiCall(method, params, auth, now, 0, "dropped"))
            raise _Abort
        if isinstance(fault, HttpFailure):
            self._record(ApiCall(method, params, auth, now, fault.status, fault.error))
            handler.send_json(fault.status, {"ok": False, "error": fault.error})
            return
        if isinstance(fault, RateLimited):
            self._record(ApiCall(method, params, auth, now, 429, "ratelimited"))
            handler.send_json(
                429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(fault.retry_after)}
            )
            return
        if auth != "app" and auth != "bot":
            error = "not_authed" if auth == "none" else "invalid_auth"
            if token == self.bot_token and method in _APP_METHODS:
                error = "not_allowed_token_type"
            self._record(ApiCall(method, params, auth, now, 200, error))
            handler.send_json(200, {"ok": False, "error": error})
            return
        # The effect and its record appear together to a test waiting on either.
        with self._cond:
            if isinstance(fault, ApiError):
                result: dict[str, Any] = {"ok": False, "error": fault.error}
            else:
                answer = getattr(self, "_m_" + method.replace(".", "_"), None)
                result = answer(params) if answer else {"ok": False, "error": "unknown_method"}
            failure = None if result.get("ok") else str(result.get("error"))
            if isinstance(fault, ApplyThenDrop):
                failure = "applied_then_dropped"
            self._record(ApiCall(method, params, auth, now, 200, failure))
        if isinstance(fault, ApplyThenDrop):
            raise _Abort
        handler.send_json(200, result)

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": self._users[self.bot_user_id].name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = secrets.token_hex(12)
        with self._cond:
            self._tickets.add(ticket)
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}"}

    def _postable(self, channel: str) -> str | None:
        conv = self._conversations.get(channel)
        if conv is None:
            return "channel_not_found"
        if conv.is_archived:
            return "is_archived"
        if not conv.is_member:
            return "not_in_channel"
        return None

    def _text_problem(self, text: Any) -> str | None:
        if not isinstance(text, str) or not text.strip():
            return "no_text"
        if len(text) > self.max_text_length:
            return "msg_too_long"
        return None

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        text = params.get("text")
        problem = self._postable(channel) or self._text_problem(text)
        if problem:
            return {"ok": False, "error": problem}
        thread_ts = params.get("thread_ts") or None
        with self._cond:
            ts = self._clock.next_ts()
            message = Message(channel, ts, str(text), self.bot_user_id, True, thread_ts)
            self._messages.append(message)
            self._cond.notify_all()
        body = self._bot_message_json(message)
        if self.echo_bot_messages:
            self._echo({"type": "message", "channel": channel, **body})
        return {"ok": True, "channel": channel, "ts": ts, "message": body}

    def _m_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._read_back(params, None)

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._read_back(params, str(params.get("ts") or ""))

    def _read_back(self, params: dict[str, Any], thread: str | None) -> dict[str, Any]:
        """Messages of a channel (``thread`` None: top level) or of a thread, newer than
        ``oldest``; bot messages as Slack shows them."""
        channel = str(params.get("channel", ""))
        if channel not in self._conversations:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(params.get("oldest") or 0)
        found = []
        with self._cond:
            for m in self._messages:
                if m.channel != channel or m.deleted or float(m.ts) <= oldest:
                    continue
                if (thread is None and m.thread_ts is None) or (
                    thread is not None and (m.ts == thread or m.thread_ts == thread)
                ):
                    found.append(m)
        out = [
            self._bot_message_json(m)
            if m.bot
            else {"type": "message", "user": m.user, "text": m.current_text, "ts": m.ts}
            for m in found
        ]
        return {"ok": True, "messages": out if thread is not None else out[::-1]}

    def _bot_message_json(self, message: Message) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "message",
            "text": message.current_text,
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "ts": message.ts,
        }
        if message.thread_ts:
            body["thread_ts"] = message.thread_ts
        return body

    def _echo(self, event: dict[str, Any]) -> None:
        # Delivered from another thread: the answer to the API call comes first, as on Slack.
        threading.Thread(target=self.send_event, args=(event,), daemon=True).start()

    def _own_message(self, channel: str, ts: str) -> Message | str:
        with self._cond:
            for message in self._messages:
                if message.channel == channel and message.ts == ts and not message.deleted:
                    return message if message.bot else "cant_update_message"
        return "message_not_found"

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if channel not in self._conversations:
            return {"ok": False, "error": "channel_not_found"}
        found = self._own_message(channel, str(params.get("ts", "")))
        if isinstance(found, str):
            return {"ok": False, "error": found}
        text = params.get("text")
        problem = self._text_problem(text)
        if problem:
            return {"ok": False, "error": problem}
        with self._cond:
            found.edits.append(Edit(str(text), time.monotonic()))
            self._cond.notify_all()
        if self.echo_bot_messages:
            self._echo(
                {
                    "type": "message",
                    "subtype": "message_changed",
                    "channel": channel,
                    "message": self._bot_message_json(found),
                    "ts": self._clock.next_ts(),
                }
            )
        return {"ok": True, "channel": channel, "ts": found.ts, "text": text}

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        found = self._own_message(channel, str(params.get("ts", "")))
        if isinstance(found, str):
            return {"ok": False, "error": found}
        with self._cond:
            found.deleted = True
            self._cond.notify_all()
        return {"ok": True, "channel": channel, "ts": found.ts}

    def _page(self, items: list[Any], params: dict[str, Any]) -> tuple[list[Any], str]:
        try:
            limit = max(1, min(int(params.get("limit") or self.page_size), self.page_size))
            start = int(base64.b64decode(str(params.get("cursor") or "MA==")).decode())
        except ValueError:
            return [], "invalid_cursor"
        end = start + limit
        cursor = base64.b64encode(str(end).encode()).decode() if end < len(items) else ""
        return items[start:end], cursor

    def _m_conversations_list(self, params: dict[str, Any]) -> dict[str, Any]:
        wanted = set(str(params.get("types") or "public_channel").split(","))
        exclude_archived = str(params.get("exclude_archived", "")).lower() in {"1", "true"}
        with self._cond:
            convs = list(self._conversations.values())
        visible = []
        for conv in convs:
            kind = (
                "im" if conv.is_im else "private_channel" if conv.is_private else "public_channel"
            )
            if kind not in wanted or (exclude_archived and conv.is_archived):
                continue
            if kind == "private_channel" and not conv.is_member:
                continue
            visible.append(conv.as_json())
        page, cursor = self._page(visible, params)
        if cursor == "invalid_cursor":
            return {"ok": False, "error": "invalid_cursor"}
        return {"ok": True, "channels": page, "response_metadata": {"next_cursor": cursor}}

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            conv = self._conversations.get(str(params.get("channel", "")))
        if conv is None or (conv.is_private and not conv.is_member):
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": conv.as_json()}

    def _m_users_list(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            members = [u.as_json(self.team_id) for u in self._users.values()]
        page, cursor = self._page(members, params)
        if cursor == "invalid_cursor":
            return {"ok": False, "error": "invalid_cursor"}
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            user = self._users.get(str(params.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user.as_json(self.team_id)}

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = params.get("filename")
        try:
            length = int(params.get("length", ""))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        if not filename or length < 0:
            return {"ok": False, "error": "invalid_arguments"}
        stored = StoredFile(self._new_id("F"), str(filename))
        with self._cond:
            self._files[stored.id] = stored
        return {
            "ok": True,
            "upload_url": f"{self.base_url}/upload/v1/{stored.id}",
            "file_id": stored.id,
        }

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            entries = json.loads(str(params.get("files", "")))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        channel = params.get("channel_id") or None
        if channel is not None:
            problem = self._postable(str(channel))
            if problem:
                return {"ok": False, "error": problem}
        shared = []
        with self._cond:
            for entry in entries if isinstance(entries, list) else []:
                stored = self._files.get(str(entry.get("id")))
                if stored is None or not stored.uploaded:
                    return {"ok": False, "error": "file_not_found"}
                stored.title = str(entry.get("title") or stored.name)
                shared.append(stored)
            if channel is not None:
                ts = self._clock.next_ts()
                message = Message(
                    str(channel),
                    ts,
                    str(params.get("initial_comment") or ""),
                    self.bot_user_id,
                    True,
                    params.get("thread_ts") or None,
                    [f.as_json(self.base_url) for f in shared],
                )
                self._messages.append(message)
            self._cond.notify_all()
        return {
            "ok": True,
            "files": [{"id": f.id, "name": f.name, "title": f.title} for f in shared],
        }

    # --- HTTP: uploads and downloads ---------------------------------------------------------

    def _upload(self, handler: _Handler, file_id: str, body: bytes) -> None:
        with self._cond:
            stored = self._files.get(file_id)
            if stored is not None:
                stored.content = body
                stored.uploaded = True
                self._cond.notify_all()
        if stored is None:
            handler.send_plain(404, b"not found")
        else:
            handler.send_plain(200, f"OK - {len(body)}".encode())

    def _download(self, handler: _Handler, file_id: str) -> None:
        if handler.headers.get("Authorization", "") != f"Bearer {self.bot_token}":
            # Slack answers an unauthenticated file URL with its login page.
            handler.send_plain(302, b"", {"Location": "https://fake.slack.test/login"})
            return
        with self._cond:
            stored = self._files.get(file_id)
            if stored is not None:
                self._downloads.append(file_id)
                self._cond.notify_all()
        if stored is None:
            handler.send_plain(404, b"not found")
        else:
            handler.send_plain(200, stored.content, {"Content-Type": stored.mimetype})

    # --- WebSocket: Socket Mode --------------------------------------------------------------

    def _websocket(self, handler: _Handler, query: dict[str, str]) -> None:
        key = handler.headers.get("Sec-WebSocket-Key")
        with self._cond:
            known = query.get("ticket") in self._tickets
        upgrade = handler.headers.get("Upgrade", "").lower() == "websocket"
        if not (key and known and upgrade):
            handler.send_plain(401 if not known else 400, b"bad socket mode request")
            return
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", ws.accept_key(key))
        handler.end_headers()
        handler.wfile.flush()
        handler.close_connection = True
        with self._cond:
            self.connections_opened += 1
            sock = _Socket(handler.connection, self.connections_opened)
        sock.send_text(
            {
                "type": "hello",
                "num_connections": len(self._live_sockets()) + 1,
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                "connection_info": {"app_id": "AFAKE0001"},
            }
        )
        with self._cond:
            self._sockets.append(sock)
            self._cond.notify_all()
        self._pump()
        try:
            self._read_socket(handler, sock)
        finally:
            sock.kill()
            self._socket_closed(sock)

    def _read_socket(self, handler: _Handler, sock: _Socket) -> None:
        pieces: list[bytes] = []
        while not sock.closed:
            try:
                fin, opcode, payload = ws.read_frame(handler.rfile)
            except (EOFError, OSError, ws.ProtocolError):
                return
            if opcode == ws.OP_PING:
                with contextlib.suppress(OSError):
                    sock.send_raw(ws.encode_frame(ws.OP_PONG, payload))
            elif opcode == ws.OP_CLOSE:
                with contextlib.suppress(OSError):
                    sock.send_raw(ws.encode_frame(ws.OP_CLOSE, payload[:2]))
                return
            elif opcode in {ws.OP_TEXT, ws.OP_CONTINUATION}:
                pieces.append(payload)
                if fin:
                    self._client_text(sock, b"".join(pieces))
                    pieces = []

    def _client_text(self, sock: _Socket, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if isinstance(envelope_id, str):
            with self._cond:
                sock.in_flight.pop(envelope_id, None)
                self.acks.append(envelope_id)
                self._cond.notify_all()


# --- HTTP plumbing ---------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: TrackingHTTPServer[FakeSlack]

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_plain(status, body, {"Content-Type": "application/json", **(headers or {})})

    def send_plain(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "text/plain", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        path = parts.path
        try:
            if path.startswith("/link"):
                owner._websocket(self, query)
                return
            body = self._body()
            if path.startswith("/api/"):
                params: dict[str, Any] = dict(query)
                kind = self.headers.get("Content-Type", "")
                if body and kind.startswith("application/json"):
                    parsed = json.loads(body)
                    if isinstance(parsed, dict):
                        params.update(parsed)
                elif body:
                    params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
                owner._api(self, path[len("/api/") :], params)
            elif path.startswith("/upload/v1/") and self.command == "POST":
                owner._upload(self, path.rsplit("/", 1)[-1], body)
            elif path.startswith("/files-pri/") and self.command == "GET":
                owner._download(self, path.split("/")[2])
            else:
                self.send_plain(404, b"not found")
        except _Abort:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (OSError, EOFError):
            self.close_connection = True
        except Exception:
            owner.errors.append(traceback.format_exc())
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.send_json(500, {"ok": False, "error": "fake_server_error"})

    def log_message(self, format: str, *args: Any) -> None:
        pass

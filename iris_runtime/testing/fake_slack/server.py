"""The fake Slack server: a Slack workspace with one bot, served on loopback for the real
``slack_sdk`` to talk to.

One ``ThreadingHTTPServer`` on a free 127.0.0.1 port serves the Web API, the Socket Mode
WebSocket and the file URLs (routes: :mod:`.http_handler`). :class:`FakeSlack` is what a test
holds: it seeds and changes the workspace, makes people write (the events go out over Socket
Mode), queues faults, and reads back what the bot did. Its parts:

- :mod:`.workspace` — what the workspace holds (users, conversations, messages, files);
- :mod:`.web_api` — the ``/api/<method>`` calls, their faults and log, the file uploads and
  downloads;
- :mod:`.socket_mode` — the WebSocket connections and the delivery of event envelopes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from iris_runtime.testing.fake_slack.http_handler import SlackHandler
from iris_runtime.testing.fake_slack.socket_mode import SocketMode
from iris_runtime.testing.fake_slack.web_api import WebApi
from iris_runtime.testing.fake_slack.workspace import (
    ApiCall,
    Conversation,
    Fault,
    Message,
    StoredFile,
    User,
    Workspace,
)
from iris_runtime.testing.loopback_http import LoopbackFake, LoopbackHTTPService, wait_until

FAKE_BOT_TOKEN = "xoxb-fake-bot-token"  # noqa: S105 (fake credentials for tests)
FAKE_APP_TOKEN = "xapp-fake-app-token"  # noqa: S105
# Slack truncates text past 40,000 characters; tests lower this to provoke msg_too_long.
DEFAULT_MAX_TEXT = 40_000

T = TypeVar("T")


class FakeSlack(LoopbackFake):
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
        self._workspace = Workspace()
        self._cond = self._workspace.cond  # every part notifies it: wait_for wakes on any change
        self._socket_mode = SocketMode(self._cond)
        self._web_api = WebApi(self, self._workspace, self._socket_mode)
        self._service = LoopbackHTTPService(self, SlackHandler, name="FakeSlack")
        self.add_user(bot_user_id, bot_name, is_bot=True)
        self.add_user("UANA00001", "ana", "Ana Lima")
        self.add_user("UBEN00002", "ben", "Ben Okafor")
        self.add_channel("CGENERAL1", "general")
        self.add_channel("CRANDOM02", "random")
        self.add_channel("CLEFT0003", "left", member=False)
        self.add_dm("DANA00001", "UANA00001")

    @property
    def acks(self) -> list[str]:
        """Envelope ids the client acknowledged, in order."""
        return self._socket_mode.acks

    @property
    def connections_opened(self) -> int:
        """How many Socket Mode connections were opened so far."""
        return self._socket_mode.connections_opened

    # --- workspace ---------------------------------------------------------------------------

    def add_user(
        self, user_id: str, name: str, real_name: str = "", *, is_bot: bool = False
    ) -> User:
        with self._cond:
            user = self._workspace.users[user_id] = User(user_id, name, real_name, is_bot)
            return user

    def add_channel(
        self, channel_id: str, name: str, *, member: bool = True, private: bool = False
    ) -> Conversation:
        with self._cond:
            conv = Conversation(channel_id, name, is_member=member, is_private=private)
            self._workspace.conversations[channel_id] = conv
            return conv

    def add_dm(self, channel_id: str, user_id: str) -> Conversation:
        with self._cond:
            conv = Conversation(channel_id, "", is_member=True, is_im=True, user=user_id)
            self._workspace.conversations[channel_id] = conv
            return conv

    def set_member(self, channel_id: str, member: bool) -> None:
        """The bot joins or leaves a channel (no event is sent; see :meth:`send_event`)."""
        with self._cond:
            self._workspace.conversations[channel_id].is_member = member

    def add_file(self, name: str, content: bytes, mimetype: str = "text/plain") -> dict[str, Any]:
        """A file a person shared; returns the file object to put in a message's ``files``."""
        with self._cond:
            stored = StoredFile(self._workspace.new_id("F"), name, content, mimetype)
            self._workspace.files[stored.id] = stored
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
            found = [
                c for c in self._workspace.conversations.values() if c.is_im and c.user == user
            ]
        channel = found[0].id if found else self.add_dm(self._workspace.new_id("D"), user).id
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
            conv = self._workspace.conversations.get(channel)
            channel_type = conv.channel_type if conv else "channel"
            ts = self._workspace.clock.next_ts()
            self._workspace.messages.append(
                Message(channel, ts, text, user, False, thread_ts, files)
            )
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
                "event_id": event_id or self._workspace.new_id("Ev"),
                "event_time": int(time.time()),
                "authorizations": [
                    {"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}
                ],
            },
        }
        self._socket_mode.deliver(envelope)
        return envelope_id

    def request_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask every connected client to reconnect (Slack's ``disconnect`` message)."""
        self._socket_mode.request_disconnect(reason)

    def drop_connections(self) -> None:
        """Cut every Socket Mode connection without a close frame (a network failure)."""
        self._socket_mode.drop_all()

    # --- faults ------------------------------------------------------------------------------

    def inject(self, method: str, *faults: Fault) -> None:
        """Answer the next calls of ``method`` with these faults, one per call, in order."""
        self._web_api.inject(method, *faults)

    def pending_faults(self, method: str) -> int:
        return self._web_api.pending_faults(method)

    # --- what happened -----------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[ApiCall]:
        return self._web_api.calls(method)

    def messages(self, channel: str | None = None, *, bot: bool | None = None) -> list[Message]:
        """Messages in ``channel`` (all channels by default), oldest first."""
        with self._cond:
            return [
                m
                for m in self._workspace.messages
                if (channel is None or m.channel == channel) and (bot is None or m.bot == bot)
            ]

    def bot_messages(self, channel: str | None = None) -> list[Message]:
        return self.messages(channel, bot=True)

    def message(self, channel: str, ts: str) -> Message:
        with self._cond:
            for m in self._workspace.messages:
                if m.channel == channel and m.ts == ts:
                    return m
        raise KeyError(f"no message {ts} in {channel}")

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The replies in a thread (not its parent), oldest first."""
        return [m for m in self.messages(channel) if m.thread_ts == thread_ts and m.ts != thread_ts]

    def uploaded_files(self) -> list[StoredFile]:
        with self._cond:
            return [f for f in self._workspace.files.values() if f.uploaded]

    @property
    def downloads(self) -> list[str]:
        """Ids of files the client downloaded (with a valid bot token)."""
        with self._cond:
            return list(self._workspace.downloads)

    @property
    def connected(self) -> int:
        """How many Socket Mode connections are open now."""
        return len(self._socket_mode.live())

    def wait_for(self, predicate: Callable[[FakeSlack], T], what: str, timeout: float = 30.0) -> T:
        """Wait until ``predicate(self)`` is truthy and return its value; fail after ``timeout``
        seconds, naming ``what`` was awaited."""
        value = wait_until(self._cond, lambda: predicate(self), timeout, poll=0.1)
        if not value:
            raise AssertionError(f"fake Slack: timed out after {timeout}s waiting for {what}")
        return value

    def wait_connected(self, timeout: float = 30.0) -> None:
        self.wait_for(lambda f: f.connected, "a Socket Mode connection", timeout)

    # --- lifecycle (the rest: LoopbackFake) ------------------------------------------------------

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

    def stop(self, timeout: float = 5.0) -> None:
        if self._service.running:
            self._socket_mode.drop_all()
        self._service.stop(timeout, raise_if_stuck=False)

    # --- HTTP routes (what the request handler hands over) ------------------------------------

    def socket_request(self, handler: SlackHandler, query: dict[str, str]) -> None:
        self._socket_mode.serve(handler, query)

    def api_request(self, handler: SlackHandler, method: str, params: dict[str, Any]) -> None:
        self._web_api.answer(handler, method, params)

    def upload_request(self, handler: SlackHandler, file_id: str, body: bytes) -> None:
        self._web_api.upload(handler, file_id, body)

    def download_request(self, handler: SlackHandler, file_id: str) -> None:
        self._web_api.download(handler, file_id)

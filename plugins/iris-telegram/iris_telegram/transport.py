"""TelegramTransport: Iris in Telegram chats through the Bot API (long polling, HTML replies).

Channels are ``tg-<chat id>`` (this transport owns exactly those; everything else falls through
to the other transports and finally the headless bridge). Forum topics are kept as the event's
thread, so replies land in the topic they came from. Inbound messages are handed to the engine
(``engine.submit``: one run per chat, five waiting); ``/stop`` goes to ``engine.handle_stop``.
A leading ``@agent`` needs nothing here: the engine's router answers it through the bridge and
this transport shows the sub-agent's status lines and posts its reply like any other.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import ChannelInfo, ChannelState, TransportEvent, UserInfo
from iris_runtime.errors import InvalidInput, QueueFull
from iris_telegram import redaction
from iris_telegram.api import BotApi, RetryPolicy, TelegramError
from iris_telegram.config import TelegramConfig
from iris_telegram.context import TelegramContext
from iris_telegram.files import Downloads
from iris_telegram.inbound import Inbound, chat_id_of, parse_message, update_kind
from iris_telegram.markup import html_chunks
from iris_telegram.offsets import OffsetStore
from iris_telegram.poller import Poller
from iris_telegram.profile import TELEGRAM_PROFILE, TRANSPORT_ID
from iris_telegram.sender import ChatSender, Target
from iris_telegram.throttle import EditThrottle

log = logging.getLogger(__name__)

DIRECTORY_SIZE = 500
QUEUED = "<i>Queued…</i>"
QUEUE_FULL_NOTICE = (
    "I am still busy in this chat and 5 messages are already waiting, so I did not take this "
    "one. Please send it again once I have answered."
)


class _Directory:
    """Chats and people seen since start-up (most recent last), for the prompt."""

    def __init__(self) -> None:
        self._chats: OrderedDict[str, str] = OrderedDict()
        self._users: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, inbound: Inbound) -> None:
        with self._lock:
            for table, key, name in (
                (self._chats, inbound.channel, f"{inbound.chat_name} ({inbound.chat_type})"),
                (self._users, inbound.user_id, inbound.user_name or inbound.user_id),
            ):
                table.pop(key, None)
                table[key] = " ".join(name.split())[:80]
                while len(table) > DIRECTORY_SIZE:
                    table.popitem(last=False)

    def channels(self) -> list[ChannelInfo]:
        with self._lock:
            return [ChannelInfo(k, v) for k, v in reversed(self._chats.items())]

    def users(self) -> list[UserInfo]:
        with self._lock:
            return [UserInfo(k, v) for k, v in reversed(self._users.items())]

    def name_of(self, channel: str) -> str | None:
        with self._lock:
            return self._chats.get(channel)


class TelegramTransport:
    transport_id = TRANSPORT_ID
    prompt_profile = TELEGRAM_PROFILE
    stop_command_hint = "/stop"

    def __init__(self, engine: Engine, config: TelegramConfig) -> None:
        self._engine = engine
        self._config = config
        self._stopping = threading.Event()
        self.api = BotApi(
            config.token,
            config.api_url,
            retry=RetryPolicy(config.retry_attempts, config.retry_base, config.retry_cap),
            stopping=self._stopping,
        )
        self.throttle = EditThrottle(config.edit_interval)
        self.sender = ChatSender(self.api, self.throttle)
        data_dir = engine.settings.data_dir
        self._downloads = Downloads(self.api, data_dir, config.max_file_bytes)
        self.offsets = OffsetStore.for_bot(data_dir, self.api.bot_id)
        self._directory = _Directory()
        self._stopped_chats: set[str] = set()
        # "Queued…" placeholders of messages waiting behind a run, by (channel, message id).
        self._queued: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.bot_username: str | None = None
        self.poller: Poller | None = None

    def __repr__(self) -> str:
        return f"TelegramTransport(api={self.api!r})"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        redaction.install()
        self._stopping.clear()
        self.poller = Poller(
            self.api,
            self.offsets,
            self.handle_update,
            poll_timeout=self._config.poll_timeout,
            stopping=self._stopping,
            on_identity=self._identified,
        )
        self.poller.start()

    def stop(self) -> None:
        self._stopping.set()
        self.throttle.stop()
        if self.poller is not None:
            # A long poll in flight is abandoned: its updates are not confirmed, so they are
            # delivered again after a restart.
            self.poller.join(2.0)
        self.api.close()

    def _identified(self, me: dict[str, Any]) -> None:
        username = me.get("username")
        self.bot_username = username if isinstance(username, str) else None
        log.info("Telegram connected as @%s; polling for messages", self.bot_username or "?")

    # -- the contract ---------------------------------------------------------------------------

    def owns_channel(self, channel_id: str) -> bool:
        return chat_id_of(channel_id) is not None

    def channels(self) -> list[ChannelInfo]:
        return self._directory.channels()

    def users(self) -> list[UserInfo]:
        return self._directory.users()

    def post_message(self, channel_id: str, text: str) -> str:
        ids = self.sender.deliver(Target(self._chat(channel_id)), text)
        return str(ids[0]) if ids else ""

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        chat = self._chat(channel_id)
        chunks = html_chunks(text) or ["…"]
        if not self.throttle.wait_and_reserve(str(chat)):
            return
        self.sender.api.call(
            "editMessageText",
            {
                "chat_id": chat,
                "message_id": int(message_id),
                "text": chunks[0],
                "parse_mode": "HTML",
            },
        )

    def enqueue_event(self, event: TransportEvent) -> bool:
        """A synthetic event (API, scheduled) for a chat; False when its queue is full."""
        self._chat(event.channel)
        try:
            self._engine.submit(self, event, is_event=True, lane="events")
        except QueueFull as exc:
            log.warning("refusing an event for %s: %s", event.channel, exc.message)
            return False
        return True

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> TelegramContext:
        chat = self._chat(event.channel)
        thread = int(event.thread) if event.thread and event.thread.isdigit() else None
        reply_to = int(event.ts) if not is_event and event.ts.isdigit() else None
        with self._lock:
            placeholder = None if is_event else self._queued.pop((event.channel, event.ts), None)
        return TelegramContext(
            self.sender,
            event,
            Target(chat, thread, reply_to),
            is_event=is_event,
            channel_name=self._directory.name_of(event.channel),
            channels=self.channels(),
            users=self.users(),
            was_stopped=lambda: self._consume_stop(event.channel),
            placeholder=placeholder,
        )

    # -- inbound --------------------------------------------------------------------------------

    def handle_update(self, update: dict[str, Any]) -> None:
        """One update from getUpdates (called on the poller thread, in order)."""
        inbound = parse_message(update, self.bot_username)
        if inbound is None:
            log.debug("ignoring a Telegram %s update", update_kind(update))
            return
        self._directory.note(inbound)
        target = Target(inbound.chat_id, inbound.thread_id, inbound.message_id)
        if inbound.command == "stop":
            self._stop(inbound, target)
            return
        attachments, problems = self._downloads.fetch(inbound) if inbound.files else ([], [])
        text = "\n\n".join(p for p in (inbound.text, *problems) if p)
        event = TransportEvent(
            channel=inbound.channel,
            text=text,
            user=inbound.user_id,
            user_name=inbound.user_name,
            raw_text=inbound.text,
            ts=str(inbound.message_id),
            attachments=tuple(attachments),
            thread=str(inbound.thread_id) if inbound.thread_id is not None else None,
        )
        key = (event.channel, event.ts)
        if self._engine.is_running(inbound.channel):
            # It will wait: say so now (the run replaces this placeholder when it starts).
            try:
                queued = self.sender.send_html(target, QUEUED)
            except TelegramError as exc:
                log.warning("could not post a placeholder in %s: %s", inbound.channel, exc)
            else:
                with self._lock:
                    self._queued[key] = queued
        try:
            self._engine.submit(self, event)
        except QueueFull:
            log.warning("the queue of %s is full; a message was not taken", inbound.channel)
            with self._lock:
                queued_id = self._queued.pop(key, None)
            self._notify(target, QUEUE_FULL_NOTICE, placeholder=queued_id)
        except BaseException:
            with self._lock:
                self._queued.pop(key, None)
            raise

    def _stop(self, inbound: Inbound, target: Target) -> None:
        with self._lock:
            self._stopped_chats.add(inbound.channel)
        running = self._engine.handle_stop(inbound.channel)
        if not running:
            with self._lock:
                self._stopped_chats.discard(inbound.channel)
        self._notify(target, "Stopping." if running else "Nothing is running here.")

    def _consume_stop(self, channel: str) -> bool:
        with self._lock:
            if channel in self._stopped_chats:
                self._stopped_chats.discard(channel)
                return True
            return False

    def _notify(self, target: Target, text: str, placeholder: int | None = None) -> None:
        try:
            self.sender.deliver(target, text, placeholder=placeholder)
        except TelegramError as exc:
            log.warning("could not answer in chat %s: %s", target.chat_id, exc)

    @staticmethod
    def _chat(channel: str) -> int:
        chat = chat_id_of(channel)
        if chat is None:
            raise InvalidInput(
                f"{channel[:80]!r} is not a Telegram channel (tg-<chat id>)",
                code="invalid_channel_id",
            )
        return chat

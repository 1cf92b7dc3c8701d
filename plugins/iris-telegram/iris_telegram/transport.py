"""TelegramTransport: Iris in Telegram chats through the Bot API (long polling, HTML replies).

Channels are ``tg-<chat id>`` (this transport owns exactly those; everything else falls through
to the other transports and finally the headless bridge). Forum topics are kept as the event's
thread, so replies land in the topic they came from. Inbound messages are handed to the engine
(``engine.submit``: one run per chat, five waiting); ``/stop`` goes to ``engine.handle_stop``.
A leading ``@agent`` needs nothing here: the engine's router answers it through the bridge and
this transport shows the sub-agent's status lines and posts its reply like any other.

Who may talk to the bot: ``IRIS_TELEGRAM_ALLOWED_USERS`` / ``IRIS_TELEGRAM_ALLOWED_CHATS``
(the agent runs tools, so by default nobody may; a stranger gets their ids and how to be
allowed, once per chat per hour). Events from Iris's own API and schedule are not checked.

The poller thread only sorts updates: messages with files are downloaded on a small pool
(in order per chat: a later message of that chat waits behind the download), and cosmetic
messages ("Queued…", "Stopping.", notices) go out on another with a single attempt each, so a
slow or rate-limited chat never holds up the others.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from iris_runtime.engine.core import Engine
from iris_runtime.engine.dispatch import IGNORE, REFUSE, split_conversation
from iris_runtime.engine.transport import ChannelInfo, ChannelState, TransportEvent, UserInfo
from iris_runtime.errors import EngineStopping, InvalidInput, QueueFull
from iris_runtime.transport_kit.edit_pacing import EditPacer
from iris_runtime.transport_kit.ordered_queues import OrderedQueues
from iris_telegram import modes, redaction
from iris_telegram.api import BotApi, RetryPolicy, TelegramError
from iris_telegram.config import CHATS_VARIABLE, USERS_VARIABLE, TelegramConfig
from iris_telegram.context import TelegramContext
from iris_telegram.directory import ChatDirectory
from iris_telegram.files import Downloads
from iris_telegram.inbound import Inbound, chat_id_of, parse_message, topic_of, update_kind
from iris_telegram.offsets import OffsetStore
from iris_telegram.poller import Poller
from iris_telegram.profile import TELEGRAM_PROFILE, TRANSPORT_ID
from iris_telegram.sender import ChatSender, Target

log = logging.getLogger(__name__)

QUEUED = "<i>Queued…</i>"
NOT_RUN = "<i>Not answered yet: Iris is restarting. This message is answered after the restart.</i>"
HINT_INTERVAL = 3600.0  # seconds between two "you are not allowed" answers in one chat
DRAIN_TIMEOUT = 30.0  # seconds stop() lets runs deliver their last reply before cutting waits
NOT_ALLOWED = (
    "This bot does not answer you yet. Your Telegram user id is {user} and this chat's id is "
    "{chat}: ask the bot's operator to add it to "
    + USERS_VARIABLE
    + " (or the chat to "
    + CHATS_VARIABLE
    + ")."
)
QUEUE_FULL_NOTICE = (
    "I am still busy in this chat and 5 messages are already waiting, so I did not take this "
    "one. Please send it again once I have answered."
)


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
        self.pacer = EditPacer(config.edit_interval)
        self.sender = ChatSender(self.api, self.pacer)
        data_dir = engine.settings.data_dir
        self._downloads = Downloads(self.api, data_dir, config.max_file_bytes)
        self.offsets = OffsetStore.for_bot(data_dir, self.api.bot_id)
        self._directory = ChatDirectory()
        self._intake: OrderedQueues[int] = OrderedQueues(
            4, "telegram-intake"
        )  # downloads, then the hand-over
        self._notices: OrderedQueues[int] = OrderedQueues(
            2, "telegram-notices"
        )  # cosmetic messages
        # Messages waiting behind a run, by (channel, message id): their update id and their
        # "Queued…" placeholder (None until it is posted).
        self._waiting: dict[tuple[str, str], tuple[int | None, int | None]] = {}
        self._active: dict[str, TelegramContext] = {}  # the run in progress per chat
        self._running = 0  # contexts whose reply is not delivered yet
        self._hinted: dict[int, float] = {}  # chat -> when it was told it is not allowed
        self._lock = threading.Lock()
        self.bot_username: str | None = None
        self.poller: Poller | None = None

    def __repr__(self) -> str:
        return f"TelegramTransport(api={self.api!r})"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        redaction.install()
        self._stopping.clear()
        if not self._config.access_configured:
            log.warning(
                "Telegram: nobody is allowed to talk to the bot yet; set %s (user ids) or %s "
                "(chat ids), comma-separated, * for anyone. Until then it only tells people "
                "their ids.",
                USERS_VARIABLE,
                CHATS_VARIABLE,
            )
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
        """Called by ``Engine.stop`` after it refused new work, aborted the running runs and
        cancelled the waiting ones, and before those runs have ended. The messages that were
        waiting are not settled, so Telegram delivers them again after the restart; their
        "Queued…" placeholders say so. The edit throttle keeps working until the aborted runs
        have delivered their last reply (or ``DRAIN_TIMEOUT``)."""
        self._stopping.set()
        if self.poller is not None:
            # A long poll in flight is abandoned: its updates are not confirmed, so they are
            # delivered again after a restart.
            self.poller.join(2.0)
        with self._lock:
            waiting = list(self._waiting.items())
            self._waiting.clear()
        for (channel, _), (_, placeholder) in waiting:
            chat = chat_id_of(channel)
            if placeholder is not None and chat is not None:
                try:
                    self.sender.edit(Target(chat), placeholder, NOT_RUN, retry=False)
                except TelegramError as exc:
                    log.warning("could not update a placeholder in %s: %s", channel, exc)
        if self.poller is not None:
            self.poller.persist()
        self._intake.shutdown()
        self._notices.shutdown()
        threading.Thread(target=self._close_when_drained, daemon=True).start()

    def _close_when_drained(self) -> None:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            with self._lock:
                if self._running == 0:
                    break
            time.sleep(0.05)
        self.pacer.stop()
        self.api.close()

    def _identified(self, me: dict[str, Any]) -> None:
        username = me.get("username")
        self.bot_username = username if isinstance(username, str) else None
        log.info("Telegram connected as @%s; polling for messages", self.bot_username or "?")

    # -- the contract ---------------------------------------------------------------------------

    def owns_channel(self, channel_id: str) -> bool:
        channel, thread = split_conversation(channel_id)  # a forum topic's conversation
        return chat_id_of(channel) is not None and (thread is None or topic_of(thread) is not None)

    def channels(self) -> list[ChannelInfo]:
        return self._directory.channels()

    def users(self) -> list[UserInfo]:
        return self._directory.users()

    def post_message(self, channel_id: str, text: str) -> str:
        _, thread = split_conversation(channel_id)  # a topic's conversation: in that topic
        ids = self.sender.deliver(Target(self._chat(channel_id), topic_of(thread)), text)
        return str(ids[0]) if ids else ""

    def show_logged_message(self, channel_id: str, text: str, thread: str | None) -> str:
        """A message the engine has already logged (a sub-agent's announce): delivered like a
        reply (HTML chunks, retries, the backstops) in the forum topic ``thread`` names (the
        topic id this transport put on the run's event), else the topic of the conversation
        ``channel_id`` names, and never logged again. The first message's id ("" when the text
        renders to nothing)."""
        topic = topic_of(thread or split_conversation(channel_id)[1])
        ids = self.sender.deliver(Target(self._chat(channel_id), topic), text)
        return str(ids[0]) if ids else ""

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        """Replace a message's text (longer text continues in new messages)."""
        chat = self._chat(channel_id)
        if not message_id.isdigit():
            raise InvalidInput(
                f"{message_id[:40]!r} is not a Telegram message id", code="invalid_message_id"
            )
        self.sender.deliver(Target(chat), text or "…", placeholder=int(message_id))

    def enqueue_event(self, event: TransportEvent) -> bool:
        """A synthetic event (API, scheduled) for a chat; False when its queue is full. These
        come from Iris's operator, so the allow-lists do not apply."""
        self._chat(event.channel)
        return self._engine.submit_event(self, event) is not None

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> TelegramContext:
        chat = self._chat(event.channel)
        chat_channel, own = split_conversation(event.channel)
        thread = topic_of(event.thread or own)  # an event for a topic's conversation too
        reply_to = int(event.ts) if not is_event and event.ts.isdigit() else None
        with self._lock:
            update_id, placeholder = (
                (None, None)
                if is_event
                else self._waiting.pop((event.channel, event.ts), (None, None))
            )
        if update_id is not None:
            self._settle(update_id)  # its run starts: nothing to deliver again after a restart
        context = TelegramContext(
            self.sender,
            event,
            Target(chat, thread, reply_to),
            is_event=is_event,
            channel_name=self._directory.name_of(chat_channel),
            channels=self._directory.channels(only=chat_channel),
            users=self._directory.users(chat_channel),
            placeholder=placeholder,
            on_finish=self._finished,
        )
        with self._lock:
            self._active[event.channel] = context
            self._running += 1
        return context

    def _finished(self, context: TelegramContext) -> None:
        with self._lock:
            self._running -= 1
            if self._active.get(context.message.channel) is context:
                del self._active[context.message.channel]

    def _settle(self, update_id: int) -> None:
        if self.poller is not None:
            self.poller.ledger.settle(update_id)
            self.poller.persist()

    # -- inbound --------------------------------------------------------------------------------

    def handle_update(self, update: dict[str, Any]) -> bool:
        """One update from getUpdates (called on the poller thread, in order). Returns True when
        the update is settled later (see :mod:`iris_telegram.offsets`)."""
        inbound = parse_message(update, self.bot_username)
        if inbound is None:
            log.debug("ignoring a Telegram %s update", update_kind(update))
            return False
        if not self._config.allows(inbound.user_id, inbound.chat_id):
            self._refuse(inbound)
            return False
        self._directory.note(inbound)
        target = Target(inbound.chat_id, inbound.thread_id, inbound.message_id)
        decision, inbound = modes.decide(self._engine.channel_modes, inbound)
        if decision.action in {IGNORE, REFUSE}:  # the chat's mode (channels.json) says so
            if decision.refusal:
                self._notify(target, decision.refusal)
            return False
        if inbound.command == "stop":
            self._stop(inbound, target)
            return False
        update_id = int(update["update_id"])
        if inbound.files or self._intake.busy(inbound.chat_id):
            # Downloads happen off the poller; later messages of this chat wait behind them.
            self._intake.submit(inbound.chat_id, lambda: self._take_quietly(inbound, update_id))
        else:
            self._take(inbound, update_id)
        return True

    def _refuse(self, inbound: Inbound) -> None:
        log.debug("ignoring a message from %s in %s: not allowed", inbound.user_id, inbound.channel)
        if self._config.access_configured:
            return
        now = time.monotonic()
        with self._lock:
            last = self._hinted.get(inbound.chat_id)
            if last is not None and now - last < HINT_INTERVAL:
                return
            self._hinted[inbound.chat_id] = now
        text = NOT_ALLOWED.format(user=inbound.user_id, chat=inbound.chat_id)
        target = Target(inbound.chat_id, inbound.thread_id, inbound.message_id)
        self._notify(target, text)

    def _take_quietly(self, inbound: Inbound, update_id: int) -> None:
        with contextlib.suppress(EngineStopping):  # unsettled: delivered again after a restart
            self._take(inbound, update_id)

    def _take(self, inbound: Inbound, update_id: int) -> None:
        """Download the message's files and hand it to the engine; settles the update unless
        its run waits in the queue (it settles when the run starts)."""
        attachments, problems = self._downloads.fetch(inbound) if inbound.files else ([], [])
        text = "\n\n".join(p for p in (inbound.text, *problems) if p)
        event = TransportEvent(
            channel=inbound.run_key,
            text=text,
            user=inbound.user_id,
            user_name=inbound.user_name,
            raw_text=inbound.raw_text,
            ts=str(inbound.message_id),
            attachments=tuple(attachments),
            thread=str(inbound.thread_id) if inbound.thread_id is not None else None,
            agent=inbound.agent,
        )
        key = (event.channel, event.ts)
        target = Target(inbound.chat_id, inbound.thread_id, inbound.message_id)
        with self._lock:
            self._waiting[key] = (update_id, None)
        will_wait = self._engine.is_running(inbound.run_key)
        try:
            self._engine.submit(self, event)
        except QueueFull:
            log.warning("the queue of %s is full; a message was not taken", inbound.channel)
            with self._lock:
                self._waiting.pop(key, None)
            self._settle(update_id)
            self._notify(target, QUEUE_FULL_NOTICE)
            return
        except BaseException:
            with self._lock:
                self._waiting.pop(key, None)
            raise
        if will_wait:
            # It will wait: say so (the run replaces this placeholder when it starts).
            self._notices.submit(inbound.chat_id, lambda: self._post_queued(key, target))

    def _post_queued(self, key: tuple[str, str], target: Target) -> None:
        with self._lock:
            if key not in self._waiting:
                return  # its run started already
        try:
            queued = self.sender.send_html(target, QUEUED, retry=False)
        except TelegramError as exc:
            log.warning("could not post a placeholder in %s: %s", key[0], exc)
            return
        with self._lock:
            entry = self._waiting.get(key)
            if entry is not None:
                self._waiting[key] = (entry[0], queued)
                return
        self.sender.delete(target, queued)  # the run started meanwhile: it posts its own

    def _stop(self, inbound: Inbound, target: Target) -> None:
        with self._lock:
            context = self._active.get(inbound.run_key)
        if context is not None:
            context.mark_stopped()  # this run's reply, and no later one's, says "(stopped)"
        running = self._engine.handle_stop(inbound.run_key)
        self._notify(target, "Stopping." if running else "Nothing is running here.")

    def _notify(self, target: Target, text: str) -> None:
        """A cosmetic message, sent off the poller thread with a single attempt."""

        def send() -> None:
            try:
                self.sender.deliver(target, text, retry=False)
            except TelegramError as exc:
                log.warning("could not answer in chat %s: %s", target.chat_id, exc)

        self._notices.submit(target.chat_id, send)

    @staticmethod
    def _chat(channel: str) -> int:
        chat = chat_id_of(split_conversation(channel)[0])
        if chat is None:
            raise InvalidInput(
                f"{channel[:80]!r} is not a Telegram channel (tg-<chat id>)",
                code="invalid_channel_id",
            )
        return chat

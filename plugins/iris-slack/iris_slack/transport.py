"""SlackTransport: Iris on Slack over Socket Mode, through the official ``slack_sdk``.

Inbound: Events API envelopes over the Socket Mode WebSocket (acknowledged at once, duplicates
dropped). ``app_mention`` in a channel and any message in a direct message start a run; every
other message is written to the channel's log only, unless the channel has a mode in
``channels.json`` (see :mod:`iris_slack.modes`: a thread may then be a conversation of its own,
``C…@<thread ts>``, which every method here accepts as a channel id). ``stop`` stops the run
through ``Engine.handle_stop``. Files are saved into the channel's folder first.

Channels: a Slack conversation id (``C…``, ``G…``, ``D…`` followed by capital letters and
digits, at least one of them a digit, as every Slack id has) belongs to this transport, so
channel-addressed API events and ``slack/events/`` files reach it even for a channel it has not
seen yet.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from iris_runtime.engine.core import Engine
from iris_runtime.engine.dispatch import split_conversation
from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.transport import (
    ChannelInfo,
    ChannelState,
    TransportEvent,
    UserInfo,
)
from iris_runtime.errors import EngineStopping, IrisError, QueueFull
from iris_runtime.transport_kit.edit_pacing import EditPacer
from iris_slack import modes
from iris_slack.api import SlackApi
from iris_slack.channel_ids import CHANNEL_ID, TS, mentions
from iris_slack.config import SlackConfig
from iris_slack.connection import SlackConnection
from iris_slack.context import THINKING, SlackContext
from iris_slack.directory import Directory
from iris_slack.files import save_files
from iris_slack.ordering import OrderedLanes
from iris_slack.posting import ChannelPoster
from iris_slack.profile import SLACK_PROFILE
from iris_slack.text import clip_line, inbound_text

log = logging.getLogger(__name__)

STOP_WORDS = frozenset({"stop", "/stop", "stop!", "stop."})
# Message subtypes that are a person saying something; edits, joins, bots and the like are not.
SPOKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
SEEN_CAPACITY = 4096
QUEUED = "Queued: I will answer when the current reply is done."
BUSY = (
    "I'm busy in this channel: a reply is running and 5 more messages are waiting. "
    "Send it again once I have answered."
)
EMPTY = "I'm here. Mention me with a question or a task."
SHUTTING_DOWN = "I'm restarting; send that again in a minute."


class SlackTransport:
    transport_id = "slack"
    prompt_profile = SLACK_PROFILE
    stop_command_hint = "send `stop` in a direct message, or `@Iris stop` in the channel"

    def __init__(self, engine: Engine, config: SlackConfig, *, pacer: EditPacer | None = None):
        self._engine = engine
        self.engine = engine  # for iris_slack.modes
        self._config = config
        self._data_dir = engine.settings.data_dir
        self._stopping = threading.Event()
        self.api = SlackApi(config, stopping=self._stopping)
        self.directory = Directory(self.api)
        self.pacer = pacer or EditPacer()
        self._poster = ChannelPoster(self.api, self.pacer, self._stopping)
        # The directory (users, conversations: paged and rate-limited, minutes on a big
        # workspace) fills in after the connection, so no event waits for it; names are looked
        # up one by one meanwhile.
        self._connection = SlackConnection(
            config,
            self.api,
            self._stopping,
            on_request=self._on_request,
            on_connected=self._load_directory,
        )
        self.connected = self._connection.connected
        self._lock = threading.Lock()
        # (channel, message ts) -> (placeholder ts, whether it says "queued")
        self._placeholders: dict[tuple[str, str], tuple[str, bool]] = {}
        self._active: dict[str, SlackContext] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lanes = OrderedLanes()
        # (channel, message ts) -> the run's context, until the run settles
        self._contexts: dict[tuple[str, str], SlackContext] = {}

    @property
    def bot_user_id(self) -> str | None:
        return self._connection.bot_user_id

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background: the engine's start must not wait for Slack."""
        self._connection.start()

    def stop(self) -> None:
        self._stopping.set()
        self._connection.close()
        self._lanes.shutdown()

    def _load_directory(self) -> None:
        threading.Thread(
            target=self.directory.load, name="iris-slack-directory", daemon=True
        ).start()

    # -- ChannelTransport ---------------------------------------------------------------------

    def owns_channel(self, channel_id: str) -> bool:
        channel, thread = split_conversation(channel_id)  # a thread of a channel in a mode
        return bool(CHANNEL_ID.fullmatch(channel)) and (
            thread is None or bool(TS.fullmatch(thread))
        )

    def channels(self) -> list[ChannelInfo]:
        return self.directory.channels()

    def users(self) -> list[UserInfo]:
        return self.directory.users()

    def post_message(self, channel_id: str, text: str) -> str:
        """Post ``text`` as a new message (longer text continues in its thread); its ts."""
        return self._poster.post_chunks(*split_conversation(channel_id), text)

    def show_logged_message(self, channel_id: str, text: str, thread: str | None) -> str:
        """A message the engine has already logged (a sub-agent's announce): posted like
        ``post_message`` but inside ``thread`` (the ``thread_ts`` of the message that started
        the run) when given, and never logged again. Returns the first message's ts."""
        channel, own = split_conversation(channel_id)
        return self._poster.post_chunks(channel, thread or own, text)

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        """Replace a message's text, paced like every edit; text longer than one message is
        cut to its first chunk (``post_message`` is for long text)."""
        channel_id, _ = split_conversation(channel_id)
        self._poster.update(channel_id, message_id, text)

    def enqueue_event(self, event: TransportEvent) -> bool:
        """A synthetic event (scheduled, or ``POST /channels/<id>/events``): a run on the
        ``events`` lane, replying in the channel. False when the channel's queue is full."""
        return self._engine.submit_event(self, event) is not None

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> SlackContext:
        with self._lock:
            placeholder, queued = self._placeholders.pop((event.channel, event.ts), (None, False))
        channel, own_thread = split_conversation(event.channel)
        ctx = SlackContext(
            self,
            event,
            placeholder_ts=placeholder,
            thread_ts=event.thread or own_thread,
            placeholder_queued=queued,
            channel_name=self.directory.channel_name(channel),
            channels=self.directory.channels(),
            users=self.directory.users(),
        )
        if placeholder is not None:
            with self._lock:
                self._contexts[(event.channel, event.ts)] = ctx
        return ctx

    # -- runs in progress (for stop) ----------------------------------------------------------

    def run_started(self, channel: str, ctx: SlackContext) -> None:
        with self._lock:
            self._active[channel] = ctx

    def run_ended(self, channel: str, ctx: SlackContext) -> None:
        with self._lock:
            if self._active.get(channel) is ctx:
                del self._active[channel]

    # -- inbound ------------------------------------------------------------------------------

    def _on_request(self, client: Any, request: SocketModeRequest) -> None:
        try:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        except Exception as exc:  # the connection went away; Slack sends the event again
            log.info("slack: could not acknowledge an event (%s)", type(exc).__name__)
        if request.type != "events_api" or not isinstance(request.payload, dict):
            return
        event = request.payload.get("event")
        event_id = request.payload.get("event_id")
        if not isinstance(event, dict) or (
            isinstance(event_id, str) and self.seen_before(event_id)
        ):
            return
        channel = event.get("channel")
        key = channel if isinstance(channel, str) else ""
        self._lanes.submit(key, lambda: self.handle_event(event))

    def seen_before(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return True
            self._seen[key] = None
            while len(self._seen) > SEEN_CAPACITY:
                self._seen.popitem(last=False)
            return False

    def handle_event(self, event: dict[str, Any]) -> None:
        """One Events API event (the ``event`` of an ``events_api`` envelope)."""
        kind = event.get("type")
        channel = event.get("channel")
        if kind == "app_mention":
            self._on_message(event, mention=True)
        elif kind == "message":
            self._on_message(event, mention=False)
        elif kind == "member_joined_channel" and event.get("user") == self.bot_user_id:
            if isinstance(channel, str) and self.owns_channel(channel):
                self.directory.joined(channel)
        elif kind in {"channel_left", "group_left"} and isinstance(channel, str):
            self.directory.left(channel)
        elif kind in {"channel_rename", "group_rename"} and isinstance(channel, dict):
            if isinstance(channel.get("id"), str) and isinstance(channel.get("name"), str):
                self.directory.renamed(channel["id"], channel["name"])
        elif kind in {"user_change", "team_join"} and isinstance(event.get("user"), dict):
            self.directory.learn_user(event["user"])

    def _on_message(self, event: dict[str, Any], *, mention: bool) -> None:
        channel, ts, user = event.get("channel"), event.get("ts"), event.get("user")
        raw = event.get("text") if isinstance(event.get("text"), str) else ""
        assert isinstance(raw, str)
        if event.get("subtype") not in SPOKEN_SUBTYPES or event.get("bot_id"):
            return  # edits, deletions, joins, other bots and our own posts
        if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(user, str)):
            return
        if user == self.bot_user_id:
            return
        if not self.owns_channel(channel):
            log.warning("slack: ignoring a message for an unexpected channel id %r", channel[:40])
            return
        if modes.dispatch(self, event, mention=mention):
            return  # the channel has a mode (channels.json): the engine's pipeline decided
        direct = event.get("channel_type") == "im" or channel.startswith("D")
        # In channels the app_mention starts the run; in a direct message, the message does.
        triggers = not direct if mention else direct
        if not triggers:
            if not mentions(raw, self.bot_user_id):
                self.log_only(channel, event, raw, user)
            return  # a mention's message event: its app_mention starts the run
        if self.seen_before(f"{channel}:{ts}"):
            return
        self.start_run(event, channel, ts, user, raw)

    def log_only(self, channel: str, event: dict[str, Any], raw: str, user: str) -> None:
        """A message Iris was not asked to answer is still part of the channel's log."""
        try:
            self._engine.sessions.append_marker(
                channel,
                "slack_message",
                user=user,
                userName=self.directory.user_name(user),
                text=raw,
                slackTs=event.get("ts"),
                thread=event.get("thread_ts"),
                files=[
                    str(f.get("name", "")) for f in event.get("files") or [] if isinstance(f, dict)
                ],
            )
        except (IrisError, OSError) as exc:
            log.warning("slack: could not log a message of %s: %s", channel, exc)

    def start_run(
        self,
        event: dict[str, Any],
        channel: str,
        ts: str,
        user: str,
        raw: str,
        *,
        thread: str | None = None,
        conversation: str | None = None,
        agent: str | None = None,
    ) -> None:
        """A run for the message. A channel mode gives the conversation (a thread's own, or
        the channel), the thread to answer in (None: at top level) and the agent that answers;
        without one, the answer goes in the message's thread."""
        if conversation is None:
            thread = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else ts
        text = inbound_text(raw, self.bot_user_id)
        key = conversation or channel
        if text.strip().lower() in STOP_WORDS:
            self.log_only(channel, event, raw, user)
            self._stop(channel, thread, key)
            return
        files = [f for f in event.get("files") or [] if isinstance(f, dict)]
        if not text and not files:
            self.log_only(channel, event, raw, user)
            self.post_quietly(channel, EMPTY, thread)
            return
        busy = self._engine.is_running(key)
        placeholder = self.post_quietly(channel, f"_{QUEUED if busy else THINKING}_", thread)
        attachments, problems = save_files(
            self.api, self._config.max_file_bytes, self._data_dir, key, ts, files
        )  # in the conversation's folder (a thread's own in a mode), where its run reads
        if problems:
            text = "\n".join([text, *problems]).strip()
        run_event = TransportEvent(
            channel=key,
            text=text or "(files only)",
            user=user,
            user_name=self.directory.user_name(user),
            raw_text=raw,
            ts=ts,
            attachments=tuple(attachments),
            thread=thread,
            agent=agent,
        )
        if placeholder is not None:
            with self._lock:
                self._placeholders[(key, ts)] = (placeholder, busy)
        try:
            ticket = self._engine.submit(self, run_event)
        except (QueueFull, EngineStopping) as exc:
            with self._lock:
                self._placeholders.pop((key, ts), None)
            self.log_only(channel, event, raw, user)
            log.warning("slack: a message in %s was not run: %s", channel, exc.message)
            note = BUSY if isinstance(exc, QueueFull) else SHUTTING_DOWN
            self._poster.replace_quietly(channel, placeholder, note, thread)
            return
        ticket.add_done_callback(lambda result: self._settled(key, ts, thread, result))

    def _settled(self, key: str, ts: str, thread: str | None, result: RunResult) -> None:
        """A run that never reached its reply (cancelled at shutdown, or failed before it
        started working) must not leave *Thinking…* behind: its placeholder says what
        happened."""
        with self._lock:
            placeholder = self._placeholders.pop((key, ts), None)
            ctx = self._contexts.pop((key, ts), None)
        channel, _ = split_conversation(key)
        note = SHUTTING_DOWN if result.status == "cancelled" else _ended_note(result)
        if placeholder is not None:  # no context was made for it
            self._poster.replace_quietly(channel, placeholder[0], note, thread)
        elif ctx is not None and not ctx.finished:
            ctx.abandon(f"_{note}_")

    def _stop(self, channel: str, thread: str | None, key: str) -> None:
        """Stop the run of ``key`` (the channel, or a thread's own conversation)."""
        with self._lock:
            ctx = self._active.get(key)
        if ctx is not None:
            ctx.stopped = True
        # The note goes out before the stop: the run's final edit must not race it (the thread
        # reads "Stopping." then the stopped reply, never the other way round).
        running = self._engine.is_running(key)
        if running:
            self.post_quietly(channel, "_Stopping._", thread)
        stopped = self._engine.handle_stop(key)
        if not running:
            self.post_quietly(
                channel, "_Stopping._" if stopped else "_Nothing is running._", thread
            )

    def post_quietly(self, channel: str, text: str, thread: str | None) -> str | None:
        return self._poster.post_quietly(channel, text, thread)


def _ended_note(result: RunResult) -> str:
    if result.status == "failed":
        reason = clip_line(result.error or result.error_code or "unknown error", 200)
        return f"(the run failed: {reason})"
    if result.status == "stopped":
        return "(stopped)"
    return "(no reply)"

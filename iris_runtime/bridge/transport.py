"""BridgeTransport: the smallest complete transport, and the catch-all owner of channels.

Posting is not a network call: replies accumulate in memory for the waiting request (an API
``message`` call, a bridge request) to collect as one string. It has no queue of its own; the
engine's per-channel queue is the only one.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from iris_runtime.engine.core import Engine
from iris_runtime.engine.headless import HeadlessContext, HeadlessTransport, PendingSinks
from iris_runtime.engine.runs import RunTicket
from iris_runtime.engine.transport import (
    ChannelInfo,
    ChannelState,
    TransportEvent,
    TransportPromptProfile,
    UserInfo,
)
from iris_runtime.errors import QueueFull

log = logging.getLogger(__name__)


def _no_directory(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    return "This conversation is headless: there is no channel or user directory."


BRIDGE_PROFILE = TransportPromptProfile(
    transport_id="bridge",
    identity_line=(
        "You are Iris, an orchestrator for specialized sub-agents, answering a program or another "
        "agent over a headless HTTP connection."
    ),
    formatting_section=(
        "Replies are returned verbatim as one string. Use plain text or CommonMark Markdown; "
        "nothing renders it for you, so keep structure simple."
    ),
    directory_section=_no_directory,
    silent_note="Begin your reply with [SILENT] when no answer is needed (for instance after a "
    "scheduled [EVENT:...] with nothing to report); the caller then gets an empty reply.",
    attach_note="The attach tool records a file for the caller; mention its path in your reply.",
    attachments_tag_name="attachments",
    max_message_chars=100_000,
)


class BridgeContext(HeadlessContext):
    """Reply plumbing for one bridge run: everything folds into one accumulator; progress
    lines go to the waiting request, files are listed for it."""

    def __init__(
        self, event: TransportEvent, on_status: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(BRIDGE_PROFILE.transport_id, event)
        self._on_status = on_status
        self.files: list[tuple[str, str | None]] = []

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        self.files.append((file_path, title))

    def set_status(self, text: str) -> None:
        if self._on_status is not None:
            self._on_status(text)


class BridgeTransport(HeadlessTransport):
    transport_id = "bridge"
    prompt_profile = BRIDGE_PROFILE
    stop_command_hint = "POST /sessions/<id>/stop"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._message_ids = itertools.count(1)
        # Where each pending request's progress lines go.
        self._status_sinks: PendingSinks[Callable[[str], None]] = PendingSinks()

    def owns_channel(self, channel_id: str) -> bool:
        return True  # the catch-all: whatever no other transport claims

    def post_message(self, channel_id: str, text: str) -> str:
        # Nobody reads a headless channel unprompted; the text is kept in the channel's log.
        self._engine.sessions.append_message(channel_id, "assistant", text, posted=True)
        return str(next(self._message_ids))

    def show_logged_message(self, channel_id: str, text: str, thread: str | None) -> str:
        """A message the engine has already logged (a sub-agent's announce): for a headless
        channel the log is the delivery (``GET /sessions/<id>/...`` reads it), so there is
        nothing more to do than name it."""
        return str(next(self._message_ids))

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        return None

    def enqueue_event(self, event: TransportEvent) -> bool:
        """Queue a synthetic event on the ``events`` lane; False when the channel's queue is full
        (the sender decides whether to retry: the events service does, the API answers 429)."""
        try:
            self._engine.submit(self, event, is_event=True, lane="events")
        except QueueFull as exc:
            log.warning("refusing an event for %s: %s", event.channel, exc.message)
            return False
        return True

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> BridgeContext:
        return BridgeContext(event, self._status_sinks.take(event))

    def submit_request(self, event: TransportEvent, on_status: Callable[[str], None]) -> RunTicket:
        """Run a bridge request whose progress lines go to ``on_status``."""
        return self._status_sinks.submit(event, on_status, lambda: self._engine.submit(self, event))

    # -- SessionInjector ----------------------------------------------------------------------

    def inject_session_message(self, event: TransportEvent) -> RunTicket:
        return self._engine.submit(self, event)

    def reset_session_context(self, channel_id: str) -> None:
        self._engine.sessions.reset(channel_id)

"""The transport of sub-agent sessions: where a child run "is" (``deliver: false``).

A child run is an ordinary engine run on a channel of its own, ``subagent-<uuid>``, so it gets
the scheduler, its lane, stop, the session log (its transcript) and live watchers for free. This
transport posts nothing anywhere: what the child says is collected for its announce, and its tool
calls are written into its transcript so ``/subagents log … tools`` can show them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from iris_runtime.engine.headless import HeadlessContext, HeadlessTransport
from iris_runtime.engine.transport import (
    ChannelInfo,
    ChannelShape,
    ChannelState,
    ToolEvent,
    TransportEvent,
    TransportPromptProfile,
    UserInfo,
)
from iris_runtime.errors import InvalidInput

if TYPE_CHECKING:
    from iris_runtime.engine.sessions import SessionStore

TRANSPORT_ID = "subagents"
CHANNEL_PREFIX = "subagent-"
_CHILD_ID = re.compile(r"subagent-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Claims exactly the ids sessions_spawn makes, nothing wider.
SHAPE = ChannelShape(TRANSPORT_ID, _CHILD_ID, _CHILD_ID, "subagent-<uuid>, made by sessions_spawn")


def _no_directory(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    return ""


# Registered because every transport has one; a child run's system prompt comes from its
# agent's folder instead (see profiles.instructions), so none of these words reach the model.
PROFILE = TransportPromptProfile(
    transport_id=TRANSPORT_ID,
    identity_line="You are a background sub-agent.",
    formatting_section="Plain text.",
    directory_section=_no_directory,
    silent_note="",
    attach_note="",
    attachments_tag_name="attachments",
    max_message_chars=100_000,
)


def is_child_channel(channel: str) -> bool:
    """Whether ``channel`` is a sub-agent session's (made by sessions_spawn, and nothing else:
    other ids that merely start with the prefix stay the other transports')."""
    return SHAPE.is_valid(channel)


class ChildContext(HeadlessContext):
    """Reply plumbing of a child run: text is kept for the announce, tool calls are logged."""

    def __init__(self, event: TransportEvent, sessions: SessionStore) -> None:
        super().__init__(TRANSPORT_ID, event)
        self.on_tool_event = self._log_tool
        self._sessions = sessions

    def _log_tool(self, event: ToolEvent) -> None:
        fields = event.as_dict()
        fields["toolKind"] = fields.pop("kind")  # "kind" is the marker's own parameter
        self._sessions.append_marker(self.message.channel, "tool", **fields)


class SubagentTransport(HeadlessTransport):
    transport_id = TRANSPORT_ID
    prompt_profile = PROFILE
    stop_command_hint = "/subagents stop <id|#|all>"

    def __init__(self, sessions: SessionStore, on_start: Callable[[str], None]) -> None:
        self._sessions = sessions
        self._on_start = on_start  # called with the channel when one of its runs starts

    def owns_channel(self, channel_id: str) -> bool:
        return is_child_channel(channel_id)

    def post_message(self, channel_id: str, text: str) -> str:
        raise InvalidInput(
            "a sub-agent session takes no posts: talk to it with sessions_send or /subagents send",
            code="subagent_session",
        )

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        self.post_message(channel_id, text)

    def enqueue_event(self, event: TransportEvent) -> bool:
        self.post_message(event.channel, event.text)
        return False

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> ChildContext:
        self._on_start(event.channel)
        return ChildContext(event, self._sessions)

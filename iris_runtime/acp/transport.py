"""The ACP transport: Iris's channels for editor sessions (``ACP-<session id>``).

It is an internal transport (never started, listed or given an events folder): messages reach
it only from the ACP agent, which submits each prompt as a run and hands the run a
:class:`PromptStream` for what the editor should see while it runs: text as it streams, tool
cards. The whole reply still folds into the context's accumulator, for the run's result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from iris_runtime.engine.agent import SILENT_MARKER
from iris_runtime.engine.core import Engine
from iris_runtime.engine.headless import HeadlessContext, HeadlessTransport, PendingSinks
from iris_runtime.engine.runs import RunTicket
from iris_runtime.engine.transport import (
    ChannelInfo,
    ChannelState,
    ToolEvent,
    TransportEvent,
    TransportPromptProfile,
    UserInfo,
)

CHANNEL_PREFIX = "ACP-"


def channel_of(session_id: str) -> str:
    return CHANNEL_PREFIX + session_id


def _no_directory(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    return "This conversation is in the user's editor: there is no channel or user directory."


ACP_PROFILE = TransportPromptProfile(
    transport_id="acp",
    identity_line=(
        "You are Iris, an orchestrator for specialized sub-agents, working with the user inside "
        "their code editor."
    ),
    formatting_section=(
        "The editor renders CommonMark Markdown: use fenced code blocks with a language for code, "
        "and keep prose short."
    ),
    directory_section=_no_directory,
    silent_note="Begin your reply with [SILENT] when no answer is needed.",
    attach_note="The attach tool records a file; mention its path in your reply.",
    attachments_tag_name="attachments",
    max_message_chars=100_000,
)


class PromptStream(Protocol):
    """Where one prompt's live output goes (the ACP connection, via its event loop)."""

    def text(self, text: str) -> None: ...
    def tool(self, event: ToolEvent) -> None: ...


class AcpContext(HeadlessContext):
    """One run's reply plumbing: deltas and tool cards stream to the editor as they happen;
    a reply that arrives whole (a routed answer, an error) is sent for what did not stream."""

    def __init__(self, event: TransportEvent, stream: PromptStream | None) -> None:
        super().__init__(ACP_PROFILE.transport_id, event)
        self._stream = stream
        self.on_tool_event = self._tool
        self.on_text_delta: Callable[[str], None] = self._delta
        self._streamed = ""  # the text of the model turn in progress, as sent
        self._held = ""  # not sent yet: it may still turn out to begin with [SILENT]

    def _delta(self, text: str) -> None:
        with self._lock:
            if self._streamed:
                send = text
            else:
                self._held += text
                begun = self._held.lstrip()  # the engine strips the text it delivers
                if len(begun) < len(SILENT_MARKER) and SILENT_MARKER.startswith(begun):
                    return  # it could still be [SILENT]
                if begun.startswith(SILENT_MARKER):
                    return  # withheld: the engine delivers nothing for it either
                send, self._held = self._held, ""
            self._streamed += send
        if self._stream is not None and send:
            self._stream.text(send)

    def _tool(self, event: ToolEvent) -> None:
        with self._lock:  # the model turn's text is over (delivered, or withheld as silent)
            self._streamed = self._held = ""
        if self._stream is not None:
            self._stream.tool(event)

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)
            streamed, self._streamed, self._held = self._streamed.strip(), "", ""
        if self._stream is None or not text:
            return
        if text.startswith(streamed):  # the engine strips what it delivers: so is ``streamed``
            rest = text[len(streamed) :]
        else:  # what streamed was not this reply (it was rewritten): send the reply whole
            rest = f"\n\n{text}" if streamed else text
        if rest:
            self._stream.text(rest)

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = []
        self.respond(text)


class AcpTransport(HeadlessTransport):
    transport_id = "acp"
    prompt_profile = ACP_PROFILE
    stop_command_hint = "the editor's stop button"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._streams: PendingSinks[PromptStream] = PendingSinks()

    def owns_channel(self, channel_id: str) -> bool:
        return channel_id.startswith(CHANNEL_PREFIX)

    def post_message(self, channel_id: str, text: str) -> str:
        # A message Iris sends unprompted (a sub-agent's announce) is kept in the log, which
        # session/load replays.
        self._engine.sessions.append_message(channel_id, "assistant", text, posted=True)
        return "0"

    def update_message(self, channel_id: str, message_id: str, text: str) -> None:
        return None

    def enqueue_event(self, event: TransportEvent) -> bool:
        return False  # no scheduled events for editor sessions

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> AcpContext:
        return AcpContext(event, self._streams.take(event))

    def submit(self, event: TransportEvent, stream: PromptStream) -> RunTicket:
        """Run one prompt; its live output goes to ``stream``. Raises QueueFull when the
        session already has five messages waiting."""
        return self._streams.submit(event, stream, lambda: self._engine.submit(self, event))

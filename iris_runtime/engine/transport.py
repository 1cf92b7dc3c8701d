"""The transport contract (spec 003): what a chat platform implements to carry Iris.

The engine knows only these shapes. A transport owns chunking, threading, typing indicators and its
own platform words (through its :class:`TransportPromptProfile`); the engine hands it whole texts.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from iris_runtime.errors import (
    NoSuchChannel,
    NotFound,
    PromptProfileMissing,
    TransportNotRunning,
)

if TYPE_CHECKING:
    from iris_runtime.engine.runs import RunTicket

STATUS_MAX_CHARS = 200


@dataclass(frozen=True)
class ChannelInfo:
    id: str
    name: str


@dataclass(frozen=True)
class UserInfo:
    id: str
    name: str


@dataclass(frozen=True)
class Attachment:
    """A file already saved under the data dir; ``local`` is relative to it."""

    local: str
    name: str


@dataclass(frozen=True)
class TransportEvent:
    """One inbound message (or synthetic event) addressed to a channel."""

    channel: str
    text: str
    user: str = "user"
    user_name: str | None = None
    raw_text: str | None = None
    ts: str = field(default_factory=lambda: f"{time.time():.6f}")
    attachments: tuple[Attachment, ...] = ()
    thread: str | None = None
    # Set by a passthrough channel (engine.dispatch): only this agent answers, never Iris's model.
    agent: str | None = None


@dataclass(frozen=True)
class ToolEvent:
    """Structured tool progress for transports that render it (tool cards).

    ``kind`` is the tool's category (one of :data:`iris_runtime.engine.tools.TOOL_KINDS`, ACP's
    tool-call kinds), so a renderer can pick a card without knowing every tool by name."""

    phase: str  # "start" | "end"
    call_id: str
    name: str
    args: dict[str, Any]
    result: str | None = None
    is_error: bool = False
    kind: str = "other"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "phase": self.phase,
            "id": self.call_id,
            "name": self.name,
            "kind": self.kind,
        }
        if self.phase == "start":
            out["args"] = self.args
        else:
            out["result"] = self.result
            out["isError"] = self.is_error
        return out


@dataclass
class ChannelState:
    """What the engine knows about a channel when it builds a context for it."""

    channel: str
    directory: Path
    running: bool = False


@dataclass(frozen=True)
class TransportPromptProfile:
    """Every platform-specific word of the system prompt lives here, never in the engine."""

    transport_id: str
    identity_line: str
    formatting_section: str
    directory_section: Callable[[list[ChannelInfo], list[UserInfo]], str]
    silent_note: str
    attach_note: str
    attachments_tag_name: str
    max_message_chars: int


@dataclass(frozen=True)
class ChannelShape:
    """The channel ids one transport claims, declared by its plugin even while it is off.

    ``claims`` (matched in full) is every id of the transport's shape, well-formed or not, such
    as ``xy-.*``; ``valid`` (in full) is the well-formed ones (None: every claimed id is), and
    ``rule`` says in words what a valid id looks like, for error messages. A claimed id is never
    handed to a catch-all transport: see :meth:`TransportRegistry.owner`.
    """

    transport_id: str
    claims: re.Pattern[str]
    valid: re.Pattern[str] | None = None
    rule: str = ""

    @classmethod
    def prefixed(
        cls, transport_id: str, prefix: str, *, valid: re.Pattern[str] | None, rule: str
    ) -> ChannelShape:
        """The usual shape: every id starting with ``prefix``, claimed in any case (on a
        case-insensitive file system ``TG-1`` and ``tg-1`` would share a folder)."""
        return cls(transport_id, re.compile(re.escape(prefix) + ".*", re.IGNORECASE), valid, rule)

    def is_valid(self, channel_id: str) -> bool:
        return self.valid is None or bool(self.valid.fullmatch(channel_id))


@runtime_checkable
class MessageContext(Protocol):
    """Reply plumbing for one inbound event, built by the transport that received it."""

    transport_id: str
    message: TransportEvent
    channel_name: str | None
    channels: list[ChannelInfo]
    users: list[UserInfo]
    on_tool_event: Callable[[ToolEvent], None] | None

    def respond(self, text: str, should_log: bool = True) -> None: ...
    def replace_message(self, text: str) -> None: ...
    def respond_in_thread(self, text: str) -> None: ...
    def set_typing(self, is_typing: bool) -> None: ...
    def upload_file(self, file_path: str, title: str | None = None) -> None: ...
    def set_working(self, working: bool) -> None: ...
    def delete_message(self) -> None: ...
    def accumulated_text(self) -> str: ...
    def set_status(self, text: str) -> None: ...


@runtime_checkable
class ChannelTransport(Protocol):
    transport_id: str
    prompt_profile: TransportPromptProfile
    stop_command_hint: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def owns_channel(self, channel_id: str) -> bool: ...
    def channels(self) -> list[ChannelInfo]: ...
    def users(self) -> list[UserInfo]: ...
    def post_message(self, channel_id: str, text: str) -> str: ...
    def update_message(self, channel_id: str, message_id: str, text: str) -> None: ...
    def enqueue_event(self, event: TransportEvent) -> bool: ...
    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> MessageContext: ...


@runtime_checkable
class SessionInjector(Protocol):
    """Implemented by transports reachable through the internal session API."""

    def inject_session_message(self, event: TransportEvent) -> RunTicket: ...
    def reset_session_context(self, channel_id: str) -> None: ...


@runtime_checkable
class LoggedMessagePoster(Protocol):
    """Optional: transports that can show a message the engine has already logged.

    A sub-agent's announce is written to the origin chat's session log by Iris itself (so the
    conversation remembers it and a restart never posts it twice); the transport only shows it,
    in the thread it came from. Transports without this get ``post_message``."""

    def show_logged_message(self, channel_id: str, text: str, thread: str | None) -> str:
        """Post ``text`` in ``channel_id`` (inside ``thread`` when given: the thread id the
        transport put on the inbound event) without logging it again; return the message id."""
        ...


@runtime_checkable
class ChannelEventSink(Protocol):
    """Optional: transports that show events happening in a channel outside any run, such as a
    background sub-agent being spawned or finishing (the Web UI draws a card for each)."""

    def on_channel_event(self, channel_id: str, event: dict[str, Any]) -> None: ...


def clip_status(text: str) -> str:
    """Status lines are single-line and at most 200 characters."""
    line = " ".join(text.split())
    return line if len(line) <= STATUS_MAX_CHARS else line[: STATUS_MAX_CHARS - 1] + "…"


class PromptProfileRegistry:
    """Profiles keyed by transport id; transports register theirs when constructed."""

    def __init__(self) -> None:
        self._profiles: dict[str, TransportPromptProfile] = {}
        self._lock = threading.Lock()

    def register(self, profile: TransportPromptProfile) -> None:
        with self._lock:
            self._profiles[profile.transport_id] = profile

    def get(self, transport_id: str) -> TransportPromptProfile:
        profile = self._profiles.get(transport_id)
        if profile is None:
            raise PromptProfileMissing(
                f"no prompt profile registered for transport {transport_id!r}; a transport must "
                "register its TransportPromptProfile when it is constructed"
            )
        return profile

    def ids(self) -> list[str]:
        return sorted(self._profiles)


class TransportRegistry:
    """Transports in registration order; the first that owns a channel serves it.

    A fallback transport (the headless bridge, which owns every channel) is always consulted last,
    whatever order it was added in, so a catch-all can never shadow a specific transport. Nor can
    it take a channel whose id has a declared :class:`ChannelShape` (declared by the transport's
    plugin whether or not the transport runs): such an id is refused instead, with
    :class:`NoSuchChannel` (404) when it is not a valid id of that transport, or when the running
    transport does not own it, and :class:`TransportNotRunning` (409) when the transport is off.
    """

    def __init__(self) -> None:
        self._ordered: list[ChannelTransport] = []
        self._fallbacks: list[ChannelTransport] = []
        self._shapes: list[ChannelShape] = []
        self._internal: list[ChannelTransport] = []

    def add(
        self, transport: ChannelTransport, *, fallback: bool = False, internal: bool = False
    ) -> None:
        """``internal``: Iris's own channels, no chat platform's (background sub-agents'
        sessions). Such a transport owns its ids and serves its runs, but is none of the chat
        transports :meth:`all` lists: it is not started or stopped, has no events folder and
        takes no events."""
        ids = {t.transport_id for t in [*self.all(), *self._internal]}
        if transport.transport_id in ids:
            raise ValueError(f"transport id {transport.transport_id!r} registered twice")
        if internal:
            self._internal.append(transport)
        else:
            (self._fallbacks if fallback else self._ordered).append(transport)

    def all(self) -> list[ChannelTransport]:
        """The chat transports, in the order they are consulted."""
        return [*self._ordered, *self._fallbacks]

    def claiming(self) -> list[ChannelTransport]:
        """The transports that claim channels of their own (every one but the catch-alls)."""
        return list(self._ordered)

    def declare(self, shape: ChannelShape) -> None:
        """Record the ids a transport claims; the first declared shape that claims an id wins."""
        self._shapes.append(shape)

    def shapes(self) -> list[ChannelShape]:
        return list(self._shapes)

    def claimed_by(self, channel_id: str) -> ChannelShape | None:
        return next((s for s in self._shapes if s.claims.fullmatch(channel_id)), None)

    def owner(self, channel_id: str) -> ChannelTransport:
        for transport in [*self._internal, *self._ordered]:
            if transport.owns_channel(channel_id):
                return transport
        self._refuse_claimed(channel_id)
        for transport in self._fallbacks:
            if transport.owns_channel(channel_id):
                return transport
        raise NotFound(f"no transport owns channel {channel_id!r}", code="no_transport")

    def session_owner(self, channel_id: str) -> SessionInjector:
        """The first transport that owns the channel and can back an API session."""
        owned = False
        for transport in self._ordered:
            if transport.owns_channel(channel_id):
                owned = True
                if isinstance(transport, SessionInjector):
                    return transport
        if not owned:
            self._refuse_claimed(channel_id)
        for transport in self._fallbacks:
            if transport.owns_channel(channel_id) and isinstance(transport, SessionInjector):
                return transport
        raise NotFound(f"no session-capable transport owns {channel_id!r}", code="no_transport")

    def _refuse_claimed(self, channel_id: str) -> None:
        """Raise if a declared shape claims ``channel_id`` (no running transport owns it)."""
        shape = self.claimed_by(channel_id)
        if shape is None:
            return
        name = shape.transport_id
        if not shape.is_valid(channel_id):
            rule = f" ({shape.rule})" if shape.rule else ""
            raise NoSuchChannel(
                f"channel {channel_id!r} is not a valid {name} channel id{rule}; "
                f"ids of this shape belong to the {name} transport"
            )
        if any(t.transport_id == name for t in self.all()):
            raise NoSuchChannel(f"the {name} transport has no channel {channel_id!r}")
        raise TransportNotRunning(
            f"channel {channel_id!r} belongs to the {name} transport, which is not running in "
            "this Iris (its plugin is installed but not configured)"
        )

    def get(self, transport_id: str) -> ChannelTransport:
        for transport in [*self.all(), *self._internal]:
            if transport.transport_id == transport_id:
                return transport
        raise NotFound(f"unknown transport {transport_id!r}", code="no_transport")

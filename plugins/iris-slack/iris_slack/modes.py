"""Slack events → the channel-mode pipeline (:mod:`iris_runtime.engine.dispatch`).

Only the mapping lives here: which Slack event is a mention, a direct message, a thread reply, an
edit or a bot's post. What happens then (run or not, which conversation, which thread) is the
engine's :class:`~iris_runtime.engine.dispatch.Decision`; a channel without a mode keeps the
transport's usual behaviour (mention or direct message).

Slack sends a mentioned message twice (a ``message`` and an ``app_mention`` event); whichever
comes first decides, the other is dropped by its ``channel:ts`` key. A channel subscribed to
``app_mention`` only still works for the mention-gated modes.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from iris_runtime.engine.core import Engine
from iris_runtime.engine.dispatch import IGNORE, REFUSE, UNCONFIGURED, InboundMessage
from iris_slack.channel_ids import TS, mentions

log = logging.getLogger(__name__)

__all__ = ["TS", "ModeHost", "dispatch", "inbound_of"]


class ModeHost(Protocol):
    """What applying a mode needs of the transport (which depends on this module, not the other
    way round): the engine's channel modes, the bot's identity, and the transport's own steps."""

    @property
    def engine(self) -> Engine: ...

    @property
    def bot_user_id(self) -> str | None: ...

    def log_only(self, channel: str, event: dict[str, Any], raw: str, user: str) -> None: ...

    def seen_before(self, key: str) -> bool: ...

    def post_quietly(self, channel: str, text: str, thread: str | None) -> str | None: ...

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
    ) -> None: ...


def inbound_of(event: dict[str, Any], bot_user_id: str | None, *, mention: bool) -> InboundMessage:
    """The neutral shape of a Slack ``message`` or ``app_mention`` event."""
    channel = str(event.get("channel") or "")
    ts = str(event.get("ts") or "")
    raw = event.get("text") if isinstance(event.get("text"), str) else ""
    thread = event.get("thread_ts")
    # A thread's parent carries its own ts as thread_ts: it is still a top-level message.
    in_thread = isinstance(thread, str) and thread != ts
    return InboundMessage(
        channel=channel,
        message_id=ts,
        user=str(event.get("user") or ""),
        text=str(raw),
        thread=thread if in_thread and isinstance(thread, str) else None,
        mentioned=mention or mentions(str(raw), bot_user_id),
        direct=event.get("channel_type") == "im" or channel.startswith("D"),
        from_bot=bool(event.get("bot_id"))
        or (bot_user_id is not None and event.get("user") == bot_user_id),
        edited=event.get("subtype") in {"message_changed", "message_deleted"} or "edited" in event,
    )


def dispatch(transport: ModeHost, event: dict[str, Any], *, mention: bool) -> bool:
    """Apply the channel's mode to ``event``; False when the channel has none (the caller
    goes on as usual)."""
    inbound = inbound_of(event, transport.bot_user_id, mention=mention)
    decision = transport.engine.channel_modes.decide(inbound)
    if decision.action == UNCONFIGURED:
        return False
    channel, ts, user, raw = inbound.channel, inbound.message_id, inbound.user, inbound.text
    if decision.action == IGNORE:
        log.debug("slack: %s in %s not run: %s", ts, channel, decision.reason)
        if not mention and not inbound.from_bot and not inbound.edited:
            transport.log_only(channel, event, raw, user)  # still part of the channel's log
        return True
    if transport.seen_before(f"{channel}:{ts}"):
        return True  # the other event of a mentioned message already did it
    if decision.action == REFUSE:
        transport.log_only(channel, event, raw, user)
        transport.post_quietly(channel, decision.refusal or "", decision.reply_thread)
        return True
    transport.start_run(
        event,
        channel,
        ts,
        user,
        raw,
        thread=decision.reply_thread,
        conversation=decision.conversation,
        agent=decision.target,
    )
    return True

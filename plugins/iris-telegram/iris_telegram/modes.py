"""Telegram messages → the channel-mode pipeline (:mod:`iris_runtime.engine.dispatch`).

The mapping only: a group (or private chat) is the channel (``tg-<chat id>``), a forum topic is
its thread, a mention is ``@bot`` in the text, a reply to the bot or a command. A reply cannot open
a thread outside topics (``threads=False``), so a message outside any topic belongs to the chat's
own conversation (``tg-<chat>``) in every mode, answered as a reply to it: a top-level follow-up
keeps the history and a top-level ``/stop`` reaches the run. A topic's conversation is
``tg-<chat>@<topic id>``. Edits never reach here (only ``message`` updates are read). A chat
without a mode keeps the transport's usual behaviour: every allowed message runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from iris_runtime.engine.dispatch import Decision, InboundMessage
from iris_telegram.inbound import Inbound

if TYPE_CHECKING:
    from iris_runtime.engine.dispatch_config import ChannelModes


def inbound_of(inbound: Inbound) -> InboundMessage:
    return InboundMessage(
        channel=inbound.channel,
        message_id=str(inbound.message_id),
        user=inbound.user_id,
        text=inbound.text,
        thread=str(inbound.thread_id) if inbound.thread_id is not None else None,
        mentioned=inbound.mentioned,
        direct=inbound.chat_type == "private",
        from_bot=inbound.from_bot,
        threads=False,  # Telegram's threads are forum topics, opened beforehand
    )


def decide(modes: ChannelModes, inbound: Inbound) -> tuple[Decision, Inbound]:
    """The channel mode's decision, and the message carrying its conversation and agent."""
    decision = modes.decide(inbound_of(inbound))
    if not decision.trigger:
        return decision, inbound
    return decision, replace(inbound, conversation=decision.conversation, agent=decision.target)

"""Compaction: when a conversation nears the model's context window, older turns are replaced in
the *context* by a summary the model writes. The durable log only gains a marker (see
``SessionStore.compact``); every original turn stays on disk and in the history API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from iris_runtime.engine.provider import (
    Message,
    Provider,
    ProviderError,
    ProviderRequest,
    TextDelta,
)
from iris_runtime.engine.sessions import History, SessionStore, summary_messages, text_chars

log = logging.getLogger(__name__)

COMPACT_AT = 0.75  # share of the window the context may fill before compacting
KEEP_SHARE = 0.25  # share of the window the kept recent turns may take
SUMMARY_SYSTEM = (
    "You compress conversations. Summarise the transcript below for the assistant who will "
    "continue it: facts, decisions, open tasks, names, numbers and commitments. Be complete "
    "and concise; write only the summary."
)


def estimate_tokens(texts: Iterable[str]) -> int:
    """About four characters per token: cheap, and deliberately on the safe side."""
    return _tokens(sum(map(len, texts)))


def _tokens(chars: int) -> int:
    return chars // 4 + 1


def needs_compaction(system: str, history: list[Message], user: Message, window: int) -> bool:
    if len(history) <= 2:
        return False
    # Runs on every message: a stored History already knows its length.
    chars = history.chars if isinstance(history, History) else text_chars(history)
    return _tokens(chars + len(system) + len(user.text)) > COMPACT_AT * window


def kept_count(history: list[Message], window: int) -> int:
    """How many recent messages to keep verbatim: what fits in KEEP_SHARE of the window,
    starting at a user turn so roles still alternate after the summary."""
    budget = KEEP_SHARE * window
    used = 0
    kept = 0
    for message in reversed(history):
        used += estimate_tokens([message.text])
        if used > budget:
            break
        kept += 1
    # Never everything (something must be summarised), and never a tail that opens with an
    # assistant turn: clamp first, then walk forward to a user turn.
    kept = min(kept, len(history) - 1)
    while kept > 0 and history[-kept].role != "user":
        kept -= 1
    return kept


def _transcript(messages: list[Message]) -> str:
    return "\n\n".join(f"{m.role.upper()}: {m.text}" for m in messages)


def summarize(
    provider: Provider, model: str, messages: list[Message], abort: threading.Event
) -> str | None:
    """The model's summary of ``messages``, or None if it could not write one."""
    request = ProviderRequest(SUMMARY_SYSTEM, (Message("user", _transcript(messages)),), (), model)
    parts: list[str] = []
    for event in provider.stream(request, abort):
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, ProviderError):
            log.warning("compaction failed: %s", event.message)
            return None
    summary = "".join(parts).strip()
    return summary or None


def compact_history(
    sessions: SessionStore,
    provider: Provider,
    model: str,
    channel: str,
    run_id: str,
    abort: threading.Event,
    system: str,
    history: list[Message],
    user: Message,
    status: Callable[[str], None],
) -> list[Message]:
    """The history, summarised first if it would crowd the model's context window."""
    # Providers from older plugins may not say; then the conversation is never compacted.
    window = getattr(provider, "context_window", None)
    if not isinstance(window, int) or not needs_compaction(system, history, user, window):
        return history
    kept = kept_count(history, window)
    status("→ compacting the conversation")
    summary = summarize(provider, model, history[: len(history) - kept], abort)
    if summary is None:
        return history
    sessions.compact(channel, summary, kept, run_id)
    log.info("compacted %s: %d messages summarised, %d kept", channel, len(history) - kept, kept)
    # ``history`` predates this run's user message, which the loop appends itself.
    return summary_messages(summary) + history[len(history) - kept :]

"""The announce: what a finished sub-agent posts in the chat it was spawned from.

Normalised to one template (spec 001) so people and the main agent can read it at a glance::

    Sub-agent #2 "label" (agent main) finished.
    Status: success
    Result: <the announce step's summary, or (not available)>
    Notes: <errors and useful details, or none>
    Stats: runtime 5m12s · tokens 1,234 in / 567 out / 1,801 total · est. cost $0.0123 ·
    sessionKey agent:main:subagent:… · sessionId subagent-… · transcript /…/log.jsonl

``Status`` comes from what the runtime saw (the run's outcome, the timeout timer, a restart),
never from the model's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iris_runtime.engine.provider import Usage

ANNOUNCE_SKIP = "ANNOUNCE_SKIP"
NOT_AVAILABLE = "(not available)"
STATUSES = ("success", "error", "timeout", "unknown")
ANNOUNCE_PROMPT = (
    "Your task has ended. Write the report that will be posted in the chat that asked for "
    "it: the result in a few sentences, with anything the requester needs to act on. If "
    f"nothing needs to be posted, reply with exactly {ANNOUNCE_SKIP}."
)


@dataclass(frozen=True)
class AnnounceFacts:
    """Everything the template shows, gathered by the runtime."""

    seq: int
    label: str
    agent_id: str
    status: str
    result: str | None
    notes: list[str]
    runtime_seconds: float
    usage: Usage
    priced: bool  # whether the model has prices (only then is a cost estimated)
    session_key: str
    session_id: str
    transcript: Path


def is_skip(reply: str) -> bool:
    return reply.strip() == ANNOUNCE_SKIP


def format_runtime(seconds: float) -> str:
    """``12s``, ``5m12s``, ``1h02m03s``."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def stats_line(facts: AnnounceFacts) -> str:
    usage = facts.usage
    tokens_in = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    parts = [
        f"runtime {format_runtime(facts.runtime_seconds)}",
        f"tokens {tokens_in:,} in / {usage.output_tokens:,} out / "
        f"{tokens_in + usage.output_tokens:,} total",
    ]
    if facts.priced:
        parts.append(f"est. cost ${usage.cost_usd:.4f}")
    parts += [
        f"sessionKey {facts.session_key}",
        f"sessionId {facts.session_id}",
        f"transcript {facts.transcript}",
    ]
    return "Stats: " + " · ".join(parts)


def render(facts: AnnounceFacts) -> str:
    name = f' "{facts.label}"' if facts.label else ""
    result = (facts.result or "").strip() or NOT_AVAILABLE
    notes = "; ".join(n for n in facts.notes if n) or "none"
    return "\n".join(
        [
            f"Sub-agent #{facts.seq}{name} (agent {facts.agent_id}) finished.",
            f"Status: {facts.status}",
            f"Result: {result}",
            f"Notes: {notes}",
            stats_line(facts),
        ]
    )

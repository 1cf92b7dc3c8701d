"""``@name`` at the start of a message addresses a registered sub-agent directly."""

from __future__ import annotations

import re
from collections.abc import Collection

_LEADING_MENTION = re.compile(r"@([a-z0-9][a-z0-9_-]{0,62})(?:[\s,:]+|$)", re.IGNORECASE)


def may_mention(text: str) -> bool:
    """Whether ``text`` opens with something shaped like a mention (cheap: no agent list)."""
    return _LEADING_MENTION.match(text.strip()) is not None


def parse_agent_mention(text: str, agents: Collection[str]) -> tuple[str, str] | None:
    """``(agent, rest)`` when the trimmed text starts with ``@agent`` naming a known agent.

    A mention in the middle of a message, or of a name nobody registered, is not one: such
    messages go to Iris's own turn unchanged.
    """
    stripped = text.strip()
    match = _LEADING_MENTION.match(stripped)
    if not match:
        return None
    name = match.group(1).lower()
    if name not in agents:
        return None
    return name, stripped[match.end() :].strip()

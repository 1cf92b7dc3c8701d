"""Choosing an ACP agent's model from any chat: ``@kind /model [ID|default]``.

The same words work on every transport (Slack, Telegram, the Web UI, the session API), because
they travel as an ordinary message to the agent. The choice is kept with the chat and applies
from its next turn: the agent's process is started again with it (spec 004, "Models").
"""

from __future__ import annotations

from iris_runtime.custom_agents.chats import ChatBook
from iris_runtime.custom_agents.manifest import Manifest

COMMAND = "/model"
DEFAULT = "default"


def is_model_command(text: str) -> bool:
    words = text.split()
    return bool(words) and words[0] == COMMAND


def model_command(chats: ChatBook, manifest: Manifest, chat_id: str, text: str) -> str:
    """Show or change the chat's model for ``manifest``; the reply for the chat."""
    words = text.split()[1:]
    offered = {m.id: m.label or m.id for m in manifest.models}
    current = chats.agent_state(chat_id, manifest.kind).get("model")
    current = current if current in offered else None
    if not offered:
        return f"{manifest.label} offers no model choice."
    listing = ", ".join(mid if name == mid else f"{mid} ({name})" for mid, name in offered.items())
    if not words:
        shown = current or DEFAULT
        return f"{manifest.label} model: {shown}. Offered: {listing}, or {DEFAULT}."
    wanted = words[0]
    if wanted == DEFAULT:
        chats.update_agent(chat_id, manifest.kind, model=None)
        return f"{manifest.label} uses its default model from the next message."
    if wanted not in offered:
        return f"{manifest.label} offers no model {wanted!r}. Offered: {listing}, or {DEFAULT}."
    chats.update_agent(chat_id, manifest.kind, model=wanted)
    return f"{manifest.label} uses {offered[wanted]} from the next message."

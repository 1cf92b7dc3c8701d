"""Iris's tools for ACP agents: what one tool call of an agent's MCP server does, scoped by the
token it carries (:mod:`.acp_grants`) to that agent and its chat.

Nothing the agent sends can name another chat or widen the scope: whatever ``chat`` it sends is
ignored, and the chat is the one the token was minted for.

The tools (:data:`TOOLS`): ``list_agents`` (whom it may call: the other custom agents and the
bridge sub-agents), ``call_agent`` (an ``@name`` message in its chat, routed as the owner's would
be; the answer appears in the chat), ``note`` (a note in its chat) and ``schedule_event`` (an
event file for its chat: one-shot ``at`` or periodic ``schedule`` + ``timezone``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from iris_runtime.custom_agents.acp_grants import Grant
from iris_runtime.custom_agents.service import CustomAgents, bridge_names_for
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

Reply = dict[str, Any]
Op = Callable[[CustomAgents, dict[str, Any]], Reply]
TOOLS = ("list_agents", "call_agent", "note", "schedule_event")
NOT_GRANTED: Reply = {"error": "not allowed: this tools token is unknown or expired"}
MAX_MESSAGE_CHARS = 16_000


def callable_agents(agents: CustomAgents, kind: str) -> list[dict[str, str]]:
    """Whom the agent ``kind`` may call: every other loaded custom agent, and the bridge's."""
    found = [
        {"name": a.manifest.kind, "label": a.manifest.label, "type": "custom agent"}
        for a in agents.catalog.loaded()
        if a.manifest.kind != kind
    ]
    bridge = sorted(bridge_names_for(agents.engine.settings)())
    found += [{"name": n, "label": n, "type": "bridge sub-agent"} for n in bridge if n != kind]
    return found


def tool_op(agents: CustomAgents, request: dict[str, Any], note: Op, run: Op) -> Reply:
    """The reach socket's ``tool`` op: one tool call of an ACP agent's MCP server."""
    grant = agents.grants.get(request.get("token"))
    if grant is None:
        return NOT_GRANTED
    name = request.get("name")
    args = request.get("args") if isinstance(request.get("args"), dict) else {}
    assert isinstance(args, dict)
    channel = agents.chats.channel_of(grant.chat_id)
    if channel is None:
        return {"error": f"no such chat: {grant.chat_id}"}
    # Only the granted chat: whatever "chat" the caller sent is not passed on.
    if name == "list_agents":
        return {"ok": True, "agents": callable_agents(agents, grant.kind)}
    if name == "note":
        return note(
            agents, {"text": args.get("text"), "chat": grant.chat_id, "from": grant.kind[:32]}
        )
    if name == "call_agent":
        target = str(args.get("agent", "")).lstrip("@").lower()
        allowed = {a["name"] for a in callable_agents(agents, grant.kind)}
        if target not in allowed:
            log.info("acp agent %s may not call %r: refused", grant.kind, target[:40])
            return {"error": f"not allowed: {target[:40]!r} is not an agent you may call"}
        message = args.get("message")
        if not isinstance(message, str) or not message.strip():
            return {"error": '"message" must be a non-empty string'}
        request = {"text": f"@{target} {message}", "chat": grant.chat_id, "from": grant.kind[:32]}
        return run(agents, request)
    if name == "schedule_event":
        return _schedule(agents, grant, channel, args)
    return {"error": f"unknown tool: {str(name)[:40]}"}


def _schedule(agents: CustomAgents, grant: Grant, channel: str, args: dict[str, Any]) -> Reply:
    from iris_runtime.events.catalog import add_event
    from iris_runtime.events.files import folder_of, parse_event_fields

    text = args.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_MESSAGE_CHARS:
        return {"error": f'"text" must be a non-empty string of at most {MAX_MESSAGE_CHARS}'}
    fields: dict[str, Any] = {"channelId": channel, "text": text}
    if args.get("at"):
        fields.update(type="one-shot", at=args["at"])
    elif args.get("schedule") and args.get("timezone"):
        fields.update(type="periodic", schedule=args["schedule"], timezone=args["timezone"])
    else:
        return {"error": 'give "at" (one-shot) or "schedule" and "timezone" (periodic)'}
    if not agents.rate.allow():
        return {"error": "rate limited"}
    name = f"{grant.kind}-{secrets.token_hex(4)}"
    try:
        spec = parse_event_fields(fields)
        add_event(agents.engine.settings.data_dir, folder_of(None), name, spec)
    except IrisError as exc:
        return {"error": exc.message}
    log.info("acp agent %s scheduled event %s for chat %s", grant.kind, name, grant.chat_id)
    return {"ok": True, "event": name, "chat_id": grant.chat_id}

"""The reach socket's operations: one request object in, one reply object out.

Replies are ``{"ok": true, …}`` or ``{"error": "…"}`` with the spec's exact wording where it
gives one (``unknown op: <op>``, ``no such turn``, ``rate limited``, ``no such chat: <id>``).
Unknown fields in a request are ignored, as the contract promises agents written against a
newer version.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from typing import Any

from iris_runtime.custom_agents.acp_tools import tool_op
from iris_runtime.custom_agents.service import CustomAgents
from iris_runtime.custom_agents.turns import Turn
from iris_runtime.engine.channels import SESSION_PREFIX, session_channel
from iris_runtime.engine.dispatch import split_conversation
from iris_runtime.engine.sessions import LOG_NAME
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

Reply = dict[str, Any]
NO_SUCH_TURN: Reply = {"error": "no such turn"}
RATE_LIMITED: Reply = {"error": "rate limited"}
MAX_FROM_CHARS = 32
MAX_NOTE_CHARS = 16_000


class BadRequest(Exception):
    """The request is malformed; the message is the reply's error."""


def handle(agents: CustomAgents, request: Any) -> Reply:
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        return {"error": 'a request is one JSON object with an "op"'}
    op = request["op"]
    handler = OPS.get(op)
    if handler is None:
        return {"error": f"unknown op: {op[:200]}"}  # the spec's words; a huge op is cut
    try:
        return handler(agents, request)
    except BadRequest as exc:
        return {"error": str(exc)}


# -- the reply stream of a turn (not rate limited) ------------------------------------------


def _turn_id(request: dict[str, Any]) -> str:
    turn_id = request.get("turn_id")
    if not isinstance(turn_id, str) or not turn_id:
        raise BadRequest('"turn_id" must be a string')
    return turn_id


def _delta(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    turn_id = _turn_id(request)
    text = request.get("text")
    if not isinstance(text, str):
        raise BadRequest('"text" must be a string')

    def add(turn: Turn) -> None:
        kept = turn.add_text(text)
        if kept:
            turn.output.delta(kept)

    return {"ok": True} if agents.turns.deliver(turn_id, add) else NO_SUCH_TURN


def _tool(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    turn_id = _turn_id(request)
    call_id = request.get("id")
    if not isinstance(call_id, (str, int)) or isinstance(call_id, bool) or call_id == "":
        raise BadRequest('"id" must be a string or an integer')
    if "input" in request and not isinstance(request["input"], dict):
        raise BadRequest('"input" must be an object')
    ok = agents.turns.deliver(turn_id, lambda turn: turn.deliver_tool(request))
    return {"ok": True} if ok else NO_SUCH_TURN


def _done(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    return {"ok": True} if agents.turns.finish(_turn_id(request)) else NO_SUCH_TURN


# -- speaking first (rate limited, except chats) --------------------------------------------


def _from(request: dict[str, Any]) -> str | None:
    name = request.get("from")
    if name is None:
        return None
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= MAX_FROM_CHARS
        or not name.isprintable()
        or not name.strip()
    ):
        raise BadRequest(f'"from" must be a name of 1-{MAX_FROM_CHARS} characters on one line')
    return name


def _text(request: dict[str, Any]) -> str:
    text = request.get("text")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest('"text" must be a non-empty string')
    if len(text) > MAX_NOTE_CHARS:
        raise BadRequest(f'"text" is longer than {MAX_NOTE_CHARS} characters')
    return text


def _chat(agents: CustomAgents, request: dict[str, Any]) -> tuple[str, str]:
    """``(chat_id, channel)``: the named chat, else an open turn's, else the default chat."""
    chat = request.get("chat")
    if chat is not None and not isinstance(chat, str):
        raise BadRequest('"chat" must be a chat id')
    if not chat and isinstance(request.get("turn_id"), str):
        chat = agents.turns.chat_of(request["turn_id"])
    if not chat:
        return _default_chat(agents)
    channel = agents.chats.channel_of(chat)
    if channel is None:
        raise BadRequest(f"no such chat: {chat}")
    return chat, channel


def _default_chat(agents: CustomAgents) -> tuple[str, str]:
    configured = agents.config.default_chat
    if configured is None:
        raise BadRequest("no chat given and no default chat is set (IRIS_DEFAULT_CHAT)")
    channel = agents.chats.channel_of(configured) or configured  # a chat id, or a channel
    return agents.chats.id_for(channel), channel


def _note(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    text, name = _text(request), _from(request)
    chat_id, channel = _chat(agents, request)
    if not agents.rate.allow():
        return RATE_LIMITED
    shown = f"{name or 'note'}: {text}"  # a display name only: it grants nothing
    try:
        transport = agents.engine.transports.owner(channel)
        transport.post_message(channel, shown)
    except IrisError as exc:
        return {"error": f"the note could not be delivered: {exc.message}"}
    agents.engine.sessions.append_marker(channel, "note", text=text, **{"from": name or ""})
    agents.engine.observers.publish(channel, {"type": "note", "text": text, "from": name})
    return {"ok": True, "chat_id": chat_id}


def _run(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    text, name = _text(request), _from(request)
    chat_id, channel = _chat(agents, request)
    if _admin_channel(agents, channel):
        # Only the admins people name in channels.json run there; a custom agent is none of
        # them, whatever name it gives (a name grants nothing).
        return {"error": "the chat is an admin channel (channels.json): only its admins run there"}
    if not agents.rate.allow():
        return RATE_LIMITED
    event = TransportEvent(channel=channel, text=text, user=name or "reach")
    try:
        accepted = agents.engine.dispatch(event)
    except IrisError as exc:
        return {"error": f"the turn could not be started: {exc.message}"}
    if not accepted:
        return {"error": "the chat is busy: too many messages are waiting"}
    return {"ok": True, "chat_id": chat_id}


def _admin_channel(agents: CustomAgents, channel: str) -> bool:
    base, _ = split_conversation(channel)
    rule = agents.engine.channel_modes.current().rule_for(base)
    return rule is not None and rule.mode == "admin"


def _chat_new(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    if not agents.rate.allow():
        return RATE_LIMITED
    # A new conversation of the session API: readable and writable there and by the agents.
    channel = session_channel(f"chat-{secrets.token_hex(8)}")
    chat_id = agents.chats.id_for(channel)
    return {"ok": True, "chat_id": chat_id}


def _chats(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    """Every conversation: the transports' channels and the session API's conversations, each
    given its chat id on first listing, and any other chat the book already knows."""
    agents.chats.ensure(_conversations(agents))
    return {"ok": True, "chats": agents.chats.listing()}


def _conversations(agents: CustomAgents) -> list[str]:
    engine = agents.engine
    channels: list[str] = []
    for transport in engine.transports.all():
        try:
            channels += [c.id for c in transport.channels()]
        except Exception:  # one transport in trouble must not hide the others
            log.exception("listing the channels of %s failed", transport.transport_id)
    try:
        folders = sorted(os.scandir(engine.settings.data_dir), key=lambda e: e.name)
    except OSError:
        folders = []
    channels += [
        f.name
        for f in folders
        if f.name.startswith(SESSION_PREFIX) and os.path.isfile(os.path.join(f.path, LOG_NAME))
    ]
    return channels


def _tool_call(agents: CustomAgents, request: dict[str, Any]) -> Reply:
    """An ACP agent's MCP tool call, scoped by its token (see :mod:`.acp_tools`)."""
    return tool_op(agents, request, _note, _run)


OPS: dict[str, Callable[[CustomAgents, dict[str, Any]], Reply]] = {
    "turn.delta": _delta,
    "turn.tool": _tool,
    "turn.done": _done,
    "note": _note,
    "run": _run,
    "chats": _chats,
    "chat.new": _chat_new,
    "tool": _tool_call,
}

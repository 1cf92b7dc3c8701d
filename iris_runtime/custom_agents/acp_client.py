"""Iris's side of an ACP connection (the client, the role an editor plays): session updates into
the open turn, permission requests answered at once.

Updates go through :meth:`OpenTurns.deliver`, like a relay agent's reach-socket requests, so the
same rules hold: each update is activity for the silence clock, and nothing that arrives after
the turn ended (a slow chunk after Stop, say) reaches the chat.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    WriteTextFileResponse,
)

from iris_runtime.custom_agents.turns import OpenTurns, Turn

log = logging.getLogger("iris_runtime.custom_agents.acp")

# Spec 004: allow_always if offered, else allow_once, else the first option.
PERMISSION_PREFERENCE = ("allow_always", "allow_once")
PLAN_MARKS = {"completed": "[x]", "in_progress": "[~]"}


def choose_permission(options: list[PermissionOption]) -> str | None:
    for wanted in PERMISSION_PREFERENCE:
        for option in options:
            if option.kind == wanted:
                return option.option_id
    return options[0].option_id if options else None


def text_of(content: Any) -> str:
    """The text of a content block (non-text blocks are named, never dropped unseen)."""
    if getattr(content, "type", None) == "text":
        return str(content.text)
    kind = getattr(content, "type", "unknown")
    return f"[{kind}]"


def tool_output(update: ToolCallStart | ToolCallProgress) -> str:
    """What a finished tool call produced: its text content, else its raw output."""
    parts = []
    for item in update.content or []:
        inner = getattr(item, "content", None)
        if inner is not None:
            parts.append(text_of(inner))
        elif getattr(item, "type", None) == "diff":
            parts.append(f"edited {getattr(item, 'path', '')}")
    if parts:
        return "\n".join(parts)
    raw = update.raw_output
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)


class HostClient:
    """One per agent process. ``turn`` is the turn in progress (None between turns)."""

    def __init__(self, kind: str, turns: OpenTurns) -> None:
        self.kind = kind
        self.turns = turns
        self.turn: Turn | None = None
        self.stopping = False
        self.permissions: list[dict[str, str]] = []  # what was answered, for the log and tests

    # -- session/update -----------------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        turn = self.turn
        if turn is None:
            return  # between turns (or a replay during session/load): nothing to show
        if isinstance(update, AgentMessageChunk):
            self._deliver(turn, lambda t: add_text(t, text_of(update.content)))
        elif isinstance(update, AgentThoughtChunk):
            thought = text_of(update.content)
            self._deliver(turn, lambda t: _optional(t.output, "thinking", thought))
        elif isinstance(update, AgentPlanUpdate):
            steps = " · ".join(
                f"{PLAN_MARKS.get(str(e.status), '[ ]')} {e.content}" for e in update.entries
            )
            self._deliver(turn, lambda t: _optional(t.output, "status", f"plan: {steps}"))
        elif isinstance(update, (ToolCallStart, ToolCallProgress)):
            fields = _tool_fields(update)
            self._deliver(turn, lambda t: t.deliver_tool(fields))

    def _deliver(self, turn: Turn, action: Any) -> None:
        self.turns.deliver(turn.turn_id, action)

    # -- session/request_permission -------------------------------------------------------------

    async def request_permission(
        self,
        options: list[PermissionOption],
        session_id: str,
        tool_call: ToolCallUpdate,
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        title = tool_call.title or tool_call.tool_call_id
        turn = self.turn
        chosen = None if self.stopping or turn is None else choose_permission(options)
        if chosen is None:
            log.info("acp agent %s asked permission for %r: answered cancelled", self.kind, title)
            self.permissions.append({"tool": title, "answer": "cancelled"})
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        assert turn is not None  # chosen only while a turn is open
        kind = next((o.kind for o in options if o.option_id == chosen), "")
        # Never a prompt for the owner (Iris is the sandbox), but never silent either: the log
        # and the turn's status line say what was allowed.
        log.info("acp agent %s asked permission for %r: answered %s", self.kind, title, kind)
        self.permissions.append({"tool": title, "answer": kind})
        self._deliver(turn, lambda t: _optional(t.output, "status", f"allowed: {title} ({kind})"))
        allowed = AllowedOutcome(option_id=chosen, outcome="selected")
        return RequestPermissionResponse(outcome=allowed)

    # -- what Iris does not offer (its capabilities say so) ------------------------------------

    async def write_text_file(self, *args: Any, **kwargs: Any) -> WriteTextFileResponse | None:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> ReadTextFileResponse:
        raise RequestError.method_not_found("fs/read_text_file")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def add_text(turn: Turn, text: str) -> None:
    turn.parts.append(text)
    if text:
        turn.output.delta(text)


def _optional(output: Any, method: str, text: str) -> None:
    """Thinking and status lines reach outputs that show them (a waiting tool call may not)."""
    show = getattr(output, method, None)
    if callable(show) and text:
        show(text)


def _tool_fields(update: ToolCallStart | ToolCallProgress) -> dict[str, Any]:
    """An ACP tool update in the shape of a relay ``turn.tool`` request (one card per id)."""
    fields: dict[str, Any] = {"id": update.tool_call_id}
    if update.kind is not None:
        fields["kind"] = str(update.kind)
    if update.title:
        fields["title"] = update.title
    if isinstance(update.raw_input, dict):
        fields["input"] = update.raw_input
    if update.status in ("completed", "failed"):
        fields["output"] = tool_output(update)
        fields["status"] = update.status
    return fields

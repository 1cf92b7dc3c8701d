"""The session tools of the main agent: ``sessions_spawn``, ``sessions_list``,
``sessions_history``, ``sessions_send`` and ``agents_list``.

A refusal is an error result with a clear message, never an exception. Sub-agents never get
these tools (see :mod:`.setup`).
"""

from __future__ import annotations

import json
from typing import Any

from iris_runtime.engine.tools import Tool, ToolContext, ToolResult
from iris_runtime.errors import IrisError
from iris_runtime.session_agents.events import describe
from iris_runtime.session_agents.lookup import NotFoundHere, find_spawn, transcript_lines
from iris_runtime.session_agents.service import Origin, SessionAgents, SpawnRefused

SEND_WAIT_SECONDS = 120.0
MAX_SEND_WAIT_SECONDS = 3600.0


_SPAWN_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the sub-agent is to do."},
        "label": {"type": "string", "description": "A short name shown to people."},
        "agentId": {"type": "string"},
        "model": {"type": "string"},
        "thinking": {"type": "string", "enum": ["off", "low", "medium", "high"]},
        "runTimeoutSeconds": {"type": "number", "description": "0: no limit"},
        "cleanup": {"type": "string", "enum": ["keep", "delete"]},
    },
    "required": ["task"],
}


_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


_HISTORY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sessionKey": {"type": "string", "description": "childSessionKey, runId or #n"},
        "limit": {"type": "integer"},
        "includeTools": {"type": "boolean"},
    },
    "required": ["sessionKey"],
}


_SEND_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sessionKey": {"type": "string", "description": "childSessionKey, runId or #n"},
        "message": {"type": "string"},
        "timeoutSeconds": {"type": "number"},
    },
    "required": ["sessionKey", "message"],
}


def _json(payload: dict[str, Any], *, error: bool = False) -> ToolResult:
    return ToolResult(json.dumps(payload, ensure_ascii=False), is_error=error)


def _refused(message: str) -> ToolResult:
    return _json({"status": "error", "error": message}, error=True)


def _origin(ctx: ToolContext) -> Origin:
    return Origin(ctx.channel, ctx.transport_id, ctx.thread, ctx.run_id, model=ctx.model)


class SpawnTool:
    name = "sessions_spawn"
    kind = "execute"
    description = (
        "Start a background sub-agent on a task, in its own session. Returns at once with "
        "{status: accepted, runId, childSessionKey}; when the sub-agent finishes, its report is "
        "posted in this chat by itself. Use it for research, long tasks or slow tools you need "
        "not wait for. agentId picks another agent (see agents_list)."
    )

    def __init__(self, service: SessionAgents) -> None:
        self._service = service
        self.parameters = _SPAWN_PARAMETERS

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not str(args.get("task", "")).strip():
            return _refused("task must not be empty")
        try:
            return _json(self._service.spawn(_origin(ctx), args))
        except SpawnRefused as exc:
            return _refused(str(exc))
        except IrisError as exc:
            return _refused(exc.message)


class ListTool:
    name = "sessions_list"
    kind = "read"
    description = "List the sub-agents spawned from this chat, with their status and runtime."

    def __init__(self, service: SessionAgents) -> None:
        self._service = service
        self.parameters = _NO_PARAMETERS

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        spawns = self._service.spawns(ctx.channel)
        sessions = [describe(s, self._service.current_run(s)) for s in spawns]
        return _json({"sessions": sessions})


class HistoryTool:
    name = "sessions_history"
    kind = "read"
    description = "Read a sub-agent's transcript (its messages; with includeTools its tool calls)."

    def __init__(self, service: SessionAgents) -> None:
        self._service = service
        self.parameters = _HISTORY_PARAMETERS

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            spawn = find_spawn(
                self._service.spawns(ctx.channel, archived=True), str(args["sessionKey"])
            )
        except NotFoundHere as exc:
            return _refused(str(exc))
        limit = max(1, min(int(args.get("limit", 20)), 200))
        lines = transcript_lines(
            self._service.engine.sessions, spawn, limit, bool(args.get("includeTools"))
        )
        return _json({"sessionKey": spawn.session_key, "entries": lines})


class SendTool:
    name = "sessions_send"
    kind = "execute"
    description = (
        "Send a follow-up message to one of this chat's sub-agents and wait for its reply."
    )

    def __init__(self, service: SessionAgents) -> None:
        self._service = service
        self.parameters = _SEND_PARAMETERS

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        wait = float(args.get("timeoutSeconds", SEND_WAIT_SECONDS))
        wait = max(1.0, min(wait, MAX_SEND_WAIT_SECONDS))
        try:
            spawn = find_spawn(
                self._service.spawns(ctx.channel, archived=True), str(args["sessionKey"])
            )
            handle = self._service.send(ctx.channel, spawn, str(args["message"]))
        except (NotFoundHere, SpawnRefused) as exc:
            return _refused(str(exc))
        with ctx.off_lane():  # waiting on another run: give this run's slot back meanwhile
            reply = handle.wait_for_reply(wait, ctx.abort)
        return _json({"runId": handle.record.run_id, **reply})


class AgentsListTool:
    name = "agents_list"
    kind = "read"
    description = "The agent ids sessions_spawn may use now (agentId), with their models."

    def __init__(self, service: SessionAgents) -> None:
        self._service = service
        self.parameters = _NO_PARAMETERS

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        config = self._service.config()
        agents = [
            {"id": agent_id, "model": config.agents[agent_id].model or None}
            for agent_id in config.allowed_for("main")
        ]
        return _json({"agents": agents})


def session_tools(service: SessionAgents) -> list[Tool]:
    return [
        SpawnTool(service),
        ListTool(service),
        HistoryTool(service),
        SendTool(service),
        AgentsListTool(service),
    ]

"""``iris mcp-tools``: the MCP server (stdio) Iris offers an ACP agent it runs.

Iris puts this command in every ACP session's ``mcpServers``; the agent starts it. Each tool call
goes to the serving Iris over its reach socket with the token from ``IRIS_TOOLS_TOKEN``, which
grants one agent and one chat (see :mod:`iris_runtime.custom_agents.acp_tools`). Built with the
official ``mcp`` SDK. Not a command for people: without the variables it exits at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from iris_runtime.custom_agents.acp_grants import SOCKET_VARIABLE, TOKEN_VARIABLE
from iris_runtime.custom_agents.reach_client import ReachConnection, ReachError


def _call(socket_path: Path, token: str, name: str, **args: Any) -> dict[str, Any]:
    """Iris's answer; the SDK's ToolError (an error result that says why) when it refused."""
    from mcp.server.mcpserver.exceptions import ToolError

    fields = {k: v for k, v in args.items() if v is not None}
    try:
        with ReachConnection(socket_path) as conn:
            answer = conn.request("tool", token=token, name=name, args=fields)
    except ReachError as exc:
        raise ToolError(str(exc)) from None
    if "error" in answer:
        raise ToolError(str(answer["error"]))
    return answer


def build_server(socket_path: Path, token: str) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(
        "iris",
        instructions="Iris's tools: the agents you may call, notes and events in this chat.",
    )

    @server.tool()
    def list_agents() -> str:
        """The agents you may call with call_agent: name, label and type, as JSON."""
        return json.dumps(_call(socket_path, token, "list_agents")["agents"])

    @server.tool()
    def call_agent(agent: str, message: str) -> str:
        """Send MESSAGE to AGENT in this chat, as '@agent message' from the owner would be.
        The call starts its turn after yours; its answer appears in the chat."""
        _call(socket_path, token, "call_agent", agent=agent, message=message)
        return f"{agent} was asked; its answer will appear in the chat after this turn."

    @server.tool()
    def note(text: str) -> str:
        """Put TEXT in this chat as a note (it starts no turn)."""
        _call(socket_path, token, "note", text=text)
        return "noted in the chat"

    @server.tool()
    def schedule_event(
        text: str, at: str | None = None, schedule: str | None = None, timezone: str | None = None
    ) -> str:
        """Have Iris run TEXT in this chat later: once AT (ISO-8601 with a UTC offset), or
        periodically on SCHEDULE (5-field cron) in TIMEZONE (IANA). It runs as any scheduled
        event of this chat does: Iris gets TEXT, and can hand it to an agent."""
        answer = _call(
            socket_path,
            token,
            "schedule_event",
            text=text,
            at=at,
            schedule=schedule,
            timezone=timezone,
        )
        return f"scheduled as event {answer['event']}"

    return server


@click.command("mcp-tools", hidden=True)
def mcp_tools() -> None:
    """Serve Iris's tools for an ACP agent over MCP (stdio); started by the agent."""
    token = os.environ.get(TOKEN_VARIABLE, "")
    socket_path = os.environ.get(SOCKET_VARIABLE, "")
    if not token or not socket_path:
        raise click.ClickException(
            f"{TOKEN_VARIABLE} and {SOCKET_VARIABLE} are set by Iris for the ACP agents it runs"
        )
    build_server(Path(socket_path), token).run("stdio")

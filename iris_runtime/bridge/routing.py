"""Delegation to sub-agents from Iris's side: the ``@agent`` router and the ``call_agent`` tool.

Both use :func:`call_agent_bridge`, so a delegated request streams progress, survives a dropped
connection and never loses its reply. Each origin gets a stable conversation key, so repeated
mentions from one place continue one sub-agent session.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.bridge.client import BridgeCall, BridgeError, call_agent_bridge
from iris_runtime.bridge.mentions import may_mention, parse_agent_mention
from iris_runtime.config import Settings
from iris_runtime.engine.filecache import FileCache
from iris_runtime.engine.routing import RouteOutcome, RouteRequest
from iris_runtime.engine.sessions import SessionStore
from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.engine.usage import usage_from_json
from iris_runtime.errors import IrisError
from iris_runtime.failpoints import failpoint

log = logging.getLogger(__name__)


def _call(settings: Settings, registry: AgentRegistry, agent: str, **kwargs: Any) -> BridgeCall:
    entry = registry.get(agent)
    if entry is None:
        raise BridgeError(f"no agent named {agent!r} is registered", code="unknown_agent")
    return BridgeCall(
        bridge_url=entry.bridge_url,
        idle_timeout=settings.bridge_idle_timeout_seconds,
        deadline=settings.bridge_deadline_seconds,
        agent=agent,
        # Its bridge asks for its own API token: the registered one, else the shared one.
        token=entry.token or settings.api_token,
        cacert=settings.tls_cacert,
        insecure=settings.insecure_http,
        **kwargs,
    )


class AgentMentionRouter:
    """Answers ``@agent …`` messages by calling that agent; Iris's own model is skipped."""

    def __init__(self, settings: Settings, registry: AgentRegistry, sessions: SessionStore) -> None:
        self._settings = settings
        self._registry = registry
        self._sessions = sessions
        # Asked on every message; agents.json changes rarely (see engine.filecache).
        self._sections = FileCache(lambda path: self._prompt_section(), missing=lambda path: "")

    def prompt_section(self) -> str:
        return self._sections.get(os.fspath(self._registry.path))

    def _prompt_section(self) -> str:
        try:
            entries = self._registry.load()
        except IrisError as exc:
            log.error("agents.json is unreadable: %s", exc.message)
            return ""
        if not entries:
            return ""
        names = ", ".join(sorted(entries))
        return (
            "## Sub-agents\n"
            f"Registered sub-agents: {names}. Route work by intent, no @mention needed: "
            "when a request belongs to one of them, delegate with the call_agent tool and "
            "relay its answer."
        )

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        if not may_mention(request.event.text):
            return None  # most messages: no need to read agents.json
        try:
            names = self._registry.names()
        except IrisError as exc:
            log.error("agents.json is unreadable, @mentions disabled: %s", exc.message)
            return None
        mention = parse_agent_mention(request.event.text, names)
        if mention is None:
            return None
        agent, text = mention
        return self.ask(agent, request, text or request.event.text)

    def ask(self, agent: str, request: RouteRequest, text: str) -> RouteOutcome:
        """Send ``text`` to ``agent`` for ``request`` and wait for its reply (also used by
        passthrough channels, which send every message there)."""
        event = request.event
        key = f"{request.transport_id}:{event.channel}:{event.thread or ''}"
        call = _call(
            self._settings,
            self._registry,
            agent,
            text=text,
            conversation_key=key,
            origin=f"{request.transport_id}:{event.channel}",
            on_status=request.status,
            abort=request.abort,
            request_id=f"req-{uuid.uuid4().hex}",
        )
        # Recorded before the call, so after a restart the reply can still be fetched by hand.
        self._sessions.append_marker(
            event.channel, "bridge_call", agent=agent, requestId=call.request_id
        )
        request.status(f"→ asking {agent}")
        try:
            with request.off_lane():  # waiting on the agent is not compute
                reply = call_agent_bridge(call)
        except BridgeError as exc:
            return RouteOutcome(
                f"({agent} failed: {exc.message})", "failed", exc.message, agent=agent
            )
        failpoint("bridge.reply_received")  # only the agent's job log holds it now
        if reply.status == "aborted":
            return RouteOutcome("", "stopped", agent=agent)
        status = "failed" if reply.status == "failed" else "done"
        usage = usage_from_json(reply.usage)
        # The agent chose silence: the engine then posts nothing, as for Iris's own [SILENT].
        return RouteOutcome(reply.text, status, usage=usage, agent=agent, silent=reply.silent)


class CallAgentTool:
    """Lets the model delegate to a registered sub-agent by intent."""

    name = "call_agent"
    kind = "other"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Send a message to a registered sub-agent and wait for its reply. The same conversation "
        "with the same agent continues its context."
    )

    def __init__(self, settings: Settings, registry: AgentRegistry) -> None:
        self._settings = settings
        self._registry = registry
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The sub-agent's registered name."},
                "message": {"type": "string", "description": "What to ask it."},
            },
            "required": ["agent", "message"],
            "additionalProperties": False,
        }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        agent = str(args["agent"]).lstrip("@").lower()
        try:
            call = _call(
                self._settings,
                self._registry,
                agent,
                text=args["message"],
                conversation_key=f"tool:{ctx.channel}:{agent}",
                origin=f"tool:{ctx.channel}",
                on_status=ctx.status,
                abort=ctx.abort,
            )
            with ctx.off_lane():  # waiting on the agent is not compute
                reply = call_agent_bridge(call)
        except IrisError as exc:
            return ToolResult(exc.message, is_error=True)
        if reply.status == "aborted":
            return ToolResult(f"stopped before {agent} answered (request {reply.request_id})", True)
        if reply.silent:  # an empty result would leave the model guessing why
            text = f"({agent} chose to stay silent: it has nothing to say)"
            return ToolResult(text, details={"requestId": reply.request_id})
        return ToolResult(
            reply.text, is_error=reply.status == "failed", details={"requestId": reply.request_id}
        )

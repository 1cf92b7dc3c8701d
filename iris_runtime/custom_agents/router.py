"""Reaching a custom agent the way a bridge sub-agent is reached: ``@kind …`` at the start of a
message on any transport (a :class:`MessageRouter`), and Iris's own model delegating through the
``call_custom_agent`` tool.

Progress reaches the chat as a sub-agent's does: text deltas stream where the transport shows
them live (the Web UI), each delta and tool card also makes a status line (placeholder edits on
Slack and Telegram, ``status`` events on the API's SSE stream), and tool cards are the run's own.
"""

from __future__ import annotations

from typing import Any

from iris_runtime.bridge.mentions import may_mention, parse_agent_mention
from iris_runtime.custom_agents.service import CustomAgents, service_of
from iris_runtime.custom_agents.signin import status_of
from iris_runtime.engine.core import Engine
from iris_runtime.engine.routing import RouteOutcome, RouteRequest
from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.engine.transport import ToolEvent

STATUS_TAIL_CHARS = 160
TAIL_KEPT_CHARS = 4 * STATUS_TAIL_CHARS  # room for runs of whitespace that collapse


class RouteOutput:
    """A relay turn's progress into the waiting run's output."""

    def __init__(self, label: str, request: RouteRequest) -> None:
        self._label = label
        self._request = request
        self._tail = ""  # the end of the text so far: enough for a status line, never more

    def delta(self, text: str) -> None:
        self._tail = (self._tail + text[-TAIL_KEPT_CHARS:])[-TAIL_KEPT_CHARS:]
        if self._request.output is not None:
            self._request.output.text_delta(text)
        tail = " ".join(self._tail.split())[-STATUS_TAIL_CHARS:]
        self._request.status(f"{self._label}: {tail}")

    def tool(self, event: ToolEvent) -> None:
        if self._request.output is not None:
            self._request.output.tool_event(event)
        if event.phase == "start":
            self._request.status(f"{self._label}: → {event.name}")

    def thinking(self, text: str) -> None:
        if self._request.output is not None:
            self._request.output.thinking(text)

    def status(self, text: str) -> None:
        self._request.status(f"{self._label}: {text}")


class ToolOutput:
    """A relay turn's progress while Iris's own model waits for it in a tool call."""

    def __init__(self, label: str, ctx: ToolContext) -> None:
        self._label = label
        self._ctx = ctx

    def delta(self, text: str) -> None:
        self._ctx.status(f"{self._label}: {' '.join(text.split())[-STATUS_TAIL_CHARS:]}")

    def tool(self, event: ToolEvent) -> None:
        if event.phase == "start":
            self._ctx.status(f"{self._label}: → {event.name}")

    def status(self, text: str) -> None:
        self._ctx.status(f"{self._label}: {text}")


class CustomAgentRouter:
    def __init__(self, agents: CustomAgents) -> None:
        self._agents = agents

    def prompt_section(self) -> str:
        loaded = self._agents.catalog.loaded()
        if not loaded:
            return ""
        names = ", ".join(f"{a.manifest.kind} ({a.manifest.label})" for a in loaded)
        return (
            "## Custom agents\n"
            f"Custom agents: {names}. When a request belongs to one of them, delegate with the "
            "call_custom_agent tool and relay its answer."
        )

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        if not may_mention(request.event.text):
            return None
        mention = parse_agent_mention(request.event.text, self._agents.catalog.kinds())
        if mention is None:
            return None
        kind, text = mention
        return self.ask(kind, request, text)

    def ask(self, kind: str, request: RouteRequest, text: str) -> RouteOutcome:
        """Run one turn of ``kind`` for ``request`` (also used by the Web UI's picker)."""
        agent = self._agents.catalog.get(kind)
        label = agent.manifest.label if agent is not None else kind
        event = request.event
        request.status(f"→ asking {label}")
        result = self._agents.ask(
            kind,
            event.channel,
            text,
            event.attachments,
            RouteOutput(label, request),
            request.abort,
            request.off_lane,
        )
        if result.status == "failed":
            said = f"{result.text}\n\n" if result.text else ""
            return RouteOutcome(
                f"{said}({kind} failed: {result.error})", "failed", result.error, agent=kind
            )
        return RouteOutcome(result.text, result.status, agent=kind)


class CallCustomAgentTool:
    """Lets Iris's model hand a request to a custom agent and use its answer."""

    name = "call_custom_agent"
    kind = "other"
    description = (
        "Send a message to a custom agent (see 'Custom agents' above) and wait for its reply. "
        "The agent keeps its own memory of this conversation."
    )

    def __init__(self, agents: CustomAgents) -> None:
        self._agents = agents
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The custom agent's kind."},
                "message": {"type": "string", "description": "What to ask it."},
            },
            "required": ["agent", "message"],
            "additionalProperties": False,
        }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        kind = str(args["agent"]).lstrip("@").lower()
        agent = self._agents.catalog.get(kind)
        if agent is None:
            return ToolResult(f"no custom agent named {kind!r} is loaded", is_error=True)
        output = ToolOutput(agent.manifest.label, ctx)
        result = self._agents.ask(
            kind, ctx.channel, str(args["message"]), (), output, ctx.abort, ctx.off_lane
        )
        if result.status == "stopped":
            return ToolResult(f"stopped before {kind} answered", is_error=True)
        if result.status == "failed":
            return ToolResult(f"{kind} failed: {result.error}", is_error=True)
        return ToolResult(result.text or f"({kind} answered with no text)")


def ask_pinned(engine: Engine, kind: str, request: RouteRequest) -> RouteOutcome | None:
    """A message for a conversation pinned to ``kind`` (the Web UI's picker): the whole text
    goes to that custom agent; None when ``kind`` is not one (a bridge sub-agent, say)."""
    agents = service_of(engine)
    if agents is None or agents.catalog.get(kind) is None:
        return None
    return CustomAgentRouter(agents).ask(kind, request, request.event.text)


def picker_entries(engine: Engine) -> list[dict[str, str]]:
    """Custom agents as an agent picker lists them: the kind to address, the label to show and
    whether it is ready. The shape behind it is deliberately not among them."""
    agents = service_of(engine)
    if agents is None:
        return []
    return [
        {"name": a.manifest.kind, "label": a.manifest.label, "status": status_of(a.manifest)}
        for a in agents.catalog.loaded()
    ]


def is_custom_agent(engine: Engine, kind: str) -> bool:
    agents = service_of(engine)
    return agents is not None and agents.catalog.get(kind) is not None

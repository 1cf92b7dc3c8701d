"""Passthrough channels: every message goes to the channel's agent, never to Iris's model.

The transport puts the agent on the event (``TransportEvent.agent``); this router, offered every
message before any other, hands it to that agent: a registered bridge sub-agent over the bridge,
or a custom agent through its relay. The whole text goes, ``/commands`` and ``@mentions``
included: the channel belongs to that agent.
"""

from __future__ import annotations

from iris_runtime.agents.registry import registry_for
from iris_runtime.bridge.routing import AgentMentionRouter
from iris_runtime.custom_agents.router import ask_pinned
from iris_runtime.engine.core import Engine
from iris_runtime.engine.routing import RouteOutcome, RouteRequest
from iris_runtime.errors import IrisError


class PassthroughRouter:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._registry = registry_for(engine.settings)
        self._bridge = AgentMentionRouter(engine.settings, self._registry, engine.sessions)

    def prompt_section(self) -> str:
        return ""

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        agent = request.event.agent
        if agent is None:
            return None
        text = request.event.text
        try:
            if self._registry.get(agent) is not None:
                return self._bridge.ask(agent, request, text)
        except IrisError as exc:
            return RouteOutcome(
                f"({agent} failed: {exc.message})", "failed", exc.message, agent=agent
            )
        pinned = ask_pinned(self._engine, agent, request)
        if pinned is not None:
            return pinned
        note = f"(this channel relays to {agent}, which is not available now)"
        return RouteOutcome(note, "failed", note, agent=agent)

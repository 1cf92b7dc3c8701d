"""``?agent=NAME``: a socket's messages go straight to that sub-agent, without Iris's model.

This is the engine's transport-neutral routing (a ``MessageRouter``): the run starts, logs the
message and shows progress as usual, and the router answers it. The delegation itself is the
bridge's ``@agent`` router, handed the message as if it began with ``@NAME``, so the call, its
status lines, its recovery from dropped connections and its explicit errors are exactly those of
an ``@mention`` in any chat. Only the routing decision differs: the socket's choice, not the
text, so a message starting with "@" reaches the chosen agent unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.engine.routing import MessageRouter, RouteOutcome, RouteRequest
from iris_runtime.errors import IrisError
from iris_webui.profile import TRANSPORT_ID


class PinSource(Protocol):
    def pinned_agent(self, channel: str, ts: str) -> str | None: ...


# Asks a custom agent (spec 004) pinned by name, or returns None when the name is not one.
CustomAsk = Callable[[str, RouteRequest], RouteOutcome | None]


class PinnedAgentRouter:
    def __init__(
        self,
        pins: PinSource,
        registry: AgentRegistry,
        mentions: MessageRouter,
        custom: CustomAsk = lambda agent, request: None,
    ) -> None:
        self._pins = pins
        self._registry = registry
        self._mentions = mentions
        self._custom = custom

    def prompt_section(self) -> str:
        return ""  # the mention router already tells the model about the agents

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        if request.transport_id != TRANSPORT_ID:
            return None
        event = request.event
        agent = self._pins.pinned_agent(event.channel, event.ts)
        if agent is None:
            return None
        custom = self._custom(agent, request)  # a custom agent is picked the same way
        if custom is not None:
            return custom
        try:
            known = agent in self._registry.names()
        except IrisError as exc:
            return RouteOutcome(f"({agent}: {exc.message})", "failed", exc.message, agent=agent)
        if not known:
            # Unregistered since the socket opened: say so rather than let Iris answer instead.
            problem = f"no agent named {agent!r} is registered"
            return RouteOutcome(f"({agent} failed: {problem})", "failed", problem, agent=agent)
        addressed = replace(event, text=f"@{agent} {event.text}")
        outcome = self._mentions.route(replace(request, event=addressed))
        if outcome is None:  # cannot happen for a registered name; never fall through to Iris
            problem = f"{agent} could not be asked"
            return RouteOutcome(f"({problem})", "failed", problem, agent=agent)
        return outcome

"""What session sub-agents add to an engine, through its public hooks only: the ``subagents``
transport (children's channels), the session tools, the ``/subagents`` router and a stop
listener (the cascade).

It sits above the service, the tools and the command, which all know the service; the service
knows none of them.
"""

from __future__ import annotations

from iris_runtime.session_agents.commands import SubagentsCommand
from iris_runtime.session_agents.service import SessionAgents
from iris_runtime.session_agents.tools import session_tools
from iris_runtime.session_agents.transport import SHAPE


def install(service: SessionAgents) -> None:
    """Add the feature to the service's engine."""
    engine = service.engine
    engine.add_transport(service.transport, internal=True)
    engine.transports.declare(SHAPE)
    for tool in session_tools(service):
        engine.tools.register(tool)
    engine.add_router(SubagentsCommand(service))
    engine.add_stop_listener(service.stop_spawned_from)

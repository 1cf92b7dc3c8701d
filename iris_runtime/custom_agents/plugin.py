"""Custom agents as a built-in plugin: started with the engine, stopped with it.

Everything is imported inside the hooks: ``iris serve``'s master loads this module to check the
plugins and must not carry the custom agents' modules into the fork.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iris_runtime import hookimpl

if TYPE_CHECKING:
    from iris_runtime.engine.core import Engine


@hookimpl
def engine_started(engine: Engine) -> None:
    from iris_runtime.custom_agents.listeners import start_listeners
    from iris_runtime.custom_agents.router import CallCustomAgentTool, CustomAgentRouter
    from iris_runtime.custom_agents.service import CustomAgents
    from iris_runtime.custom_agents.settings import CustomAgentSettings

    agents = CustomAgents(engine, CustomAgentSettings.from_settings(engine.settings))
    agents.start()
    start_listeners(agents)
    engine.add_router(CustomAgentRouter(agents))
    engine.add_tool_environment(agents.tool_environment)
    engine.tools.register(CallCustomAgentTool(agents))


@hookimpl
def engine_stopping(engine: Engine) -> None:
    from iris_runtime.custom_agents.service import service_of

    agents = service_of(engine)
    if agents is not None:
        agents.stop()

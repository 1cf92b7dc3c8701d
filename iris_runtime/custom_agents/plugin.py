"""Custom agents as a built-in plugin: started with the engine, stopped with it."""

from __future__ import annotations

from iris_runtime import hookimpl
from iris_runtime.custom_agents.router import CallCustomAgentTool, CustomAgentRouter
from iris_runtime.custom_agents.service import CustomAgents, service_of
from iris_runtime.custom_agents.settings import CustomAgentSettings
from iris_runtime.engine.core import Engine


@hookimpl
def engine_started(engine: Engine) -> None:
    agents = CustomAgents(engine, CustomAgentSettings.from_settings(engine.settings))
    agents.start()
    engine.add_router(CustomAgentRouter(agents))
    engine.tools.register(CallCustomAgentTool(agents))


@hookimpl
def engine_stopping(engine: Engine) -> None:
    agents = service_of(engine)
    if agents is not None:
        agents.stop()

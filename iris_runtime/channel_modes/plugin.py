"""The built-in channel-modes plugin: wires channels.json into a serving Iris."""

from __future__ import annotations

from collections.abc import Collection

from iris_runtime import hookimpl
from iris_runtime.channel_modes.admin import AdminCommands
from iris_runtime.channel_modes.agents import served_agent_names
from iris_runtime.channel_modes.passthrough import PassthroughRouter
from iris_runtime.custom_agents.service import service_of
from iris_runtime.engine.core import Engine


@hookimpl
def engine_started(engine: Engine) -> None:
    def custom_kinds() -> Collection[str]:
        agents = service_of(engine)  # looked up per check: it may start after this hook
        return agents.catalog.kinds() if agents is not None else ()

    engine.channel_modes.set_agent_names(served_agent_names(engine.settings, custom_kinds))
    engine.channel_modes.current()  # read now, so a bad file is logged at start-up
    engine.add_router(PassthroughRouter(engine), first=True)
    engine.add_router(AdminCommands(engine))

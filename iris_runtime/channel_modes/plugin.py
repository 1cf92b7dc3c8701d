"""The built-in channel-modes plugin: wires channels.json into a serving Iris."""

from __future__ import annotations

from iris_runtime import hookimpl
from iris_runtime.channel_modes.admin import AdminCommands
from iris_runtime.channel_modes.passthrough import PassthroughRouter
from iris_runtime.engine.core import Engine


@hookimpl
def engine_started(engine: Engine) -> None:
    engine.channel_modes.current()  # read now, so a bad file is logged at start-up
    engine.add_router(PassthroughRouter(engine), first=True)
    engine.add_router(AdminCommands(engine))

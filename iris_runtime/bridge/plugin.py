"""The built-in bridge: the headless transport, and delegation to registered sub-agents."""

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.agents.registry import registry_for
from iris_runtime.bridge.routing import AgentMentionRouter, CallAgentTool
from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine


@hookimpl(trylast=True)
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    register(BridgeTransport, fallback=True)


@hookimpl
def engine_started(engine: Engine) -> None:
    # Both need the settings and the registry, which exist only once the engine does.
    registry = registry_for(engine.settings)
    engine.add_router(AgentMentionRouter(engine.settings, registry, engine.sessions))
    engine.tools.register(CallAgentTool(engine.settings, registry))

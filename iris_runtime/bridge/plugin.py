"""The built-in headless transport, registered through the same hook as every other."""

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings


@hookimpl(trylast=True)
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    register(BridgeTransport, fallback=True)

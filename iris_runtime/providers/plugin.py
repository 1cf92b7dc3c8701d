"""Built-in providers, registered through the same hook external ones use.

The network providers are imported when one is created, not when the plugin loads: their SDKs
take well over a second to import, which every CLI command and every offline runtime would pay
otherwise, and a missing SDK then only matters to whoever chose that provider.
"""

import importlib
from collections.abc import Callable
from typing import Any

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.provider import Provider
from iris_runtime.errors import ConfigError
from iris_runtime.providers import offline

# provider name -> (module under iris_runtime.providers, the SDK package it needs)
NETWORK_PROVIDERS = {
    "anthropic": ("anthropic", "anthropic"),
    "openai": ("openai_compat", "openai"),
}


def on_demand(name: str) -> Callable[[Settings], Provider]:
    module_name, package = NETWORK_PROVIDERS[name]

    def create(settings: Settings) -> Provider:
        try:
            module = importlib.import_module(f"iris_runtime.providers.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name not in (package, "httpx2"):
                raise
            raise ConfigError(
                f"IRIS_PROVIDER={name} needs the {package!r} package: pip install {package}"
            ) from None
        factory: Callable[[Settings], Provider] = module.create
        return factory(settings)

    return create


@hookimpl
def register_providers(register: Callable[[str, Any], None]) -> None:
    register("offline", offline.create)
    for name in NETWORK_PROVIDERS:
        register(name, on_demand(name))

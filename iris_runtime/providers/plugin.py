"""Built-in providers, registered through the same hook external ones use."""

from collections.abc import Callable
from typing import Any

from iris_runtime import hookimpl
from iris_runtime.providers import offline


@hookimpl
def register_providers(register: Callable[[str, Any], None]) -> None:
    register("offline", offline.create)

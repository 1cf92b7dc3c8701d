"""A plugin whose ``register_commands`` raises: the CLI must survive it."""

from __future__ import annotations

from typing import Any

from iris_runtime import hookimpl


@hookimpl
def register_commands(cli: Any) -> None:
    raise RuntimeError("crashy plugin exploded while adding commands")

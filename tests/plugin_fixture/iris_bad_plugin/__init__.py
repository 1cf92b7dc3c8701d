"""A broken Iris plugin: its only hookimpl misspells ``register_tools``.

Iris must reject it as a whole when it loads (``PluginManager.check_pending``) and report it in
``iris plugins`` / ``iris doctor`` rather than silently ignoring the typo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iris_runtime import hookimpl


@hookimpl
def register_toolz(register: Callable[[Any], None]) -> None:  # typo: not a hookspec
    raise AssertionError("a rejected plugin's hooks must never be called")

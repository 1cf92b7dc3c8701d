"""Registers the built-in tools and sandbox levels with the plugin manager."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.engine.tools import Tool
from iris_runtime.tools.attach import AttachTool
from iris_runtime.tools.bash import BashTool
from iris_runtime.tools.files import EditTool, ReadTool, WriteTool
from iris_runtime.tools.sandbox.levels import BUILT_IN_LEVELS
from iris_runtime.tools.sandbox.select import Level


@hookimpl
def register_tools(register: Callable[[Tool], None]) -> None:
    for tool_class in (BashTool, ReadTool, WriteTool, EditTool, AttachTool):
        register(tool_class())


@hookimpl
def register_sandboxes(register: Callable[[str, Level], None]) -> None:
    for name, level in BUILT_IN_LEVELS.items():
        register(name, level)

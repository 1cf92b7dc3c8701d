"""Registers the built-in tools and the host sandbox with the plugin manager."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.engine.tools import Tool
from iris_runtime.tools.attach import AttachTool
from iris_runtime.tools.bash import BashTool
from iris_runtime.tools.files import EditTool, ReadTool, WriteTool
from iris_runtime.tools.sandbox import HostSandbox


@hookimpl
def register_tools(register: Callable[[Tool], None]) -> None:
    for tool_class in (BashTool, ReadTool, WriteTool, EditTool, AttachTool):
        register(tool_class())


@hookimpl
def register_sandboxes(register: Callable[[str, HostSandbox], None]) -> None:
    register("host", HostSandbox())

"""The built-ins plugin registers every tool and the host sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iris_runtime.engine.provider import ToolCall
from iris_runtime.engine.tools import Tool, ToolContext, ToolRegistry, tool_kind
from iris_runtime.tools import plugin
from iris_runtime.tools.sandbox import HostSandbox, SandboxSpec


def test_register_tools_and_schemas() -> None:
    registry = ToolRegistry()
    plugin.register_tools(registry.register)
    assert registry.names() == ["bash", "read", "write", "edit", "attach"]
    for spec in registry.specs():
        assert spec.parameters["type"] == "object"
        assert spec.parameters["additionalProperties"] is False
        assert set(spec.parameters["required"]) <= set(spec.parameters["properties"])


def test_built_in_tools_declare_their_card_kind() -> None:
    registry = ToolRegistry()
    plugin.register_tools(registry.register)
    kinds = {name: registry.kind(name) for name in registry.names()}
    assert kinds == {
        "bash": "execute",
        "read": "read",
        "write": "edit",
        "edit": "edit",
        "attach": "other",
    }
    assert registry.kind("no-such-tool") == "other"
    assert tool_kind(object()) == "other"  # tools written before kinds existed


def test_register_sandboxes() -> None:
    seen: dict[str, Any] = {}
    plugin.register_sandboxes(seen.__setitem__)
    assert list(seen) == ["host", "namespace", "gvisor", "docker", "firecracker"]
    host = seen["host"].open(SandboxSpec("host", None, Path("/data")))
    assert isinstance(host, HostSandbox)
    assert host.wrap(["bash", "-c", "x"]) == ["bash", "-c", "x"]


def test_registry_runs_bash_end_to_end(ctx: ToolContext) -> None:
    registry = ToolRegistry()
    tools: list[Tool] = []
    plugin.register_tools(tools.append)
    for tool in tools:
        registry.register(tool)
    result = registry.execute(ToolCall("c1", "bash", {"command": "echo hi"}), ctx)
    assert result.text == "hi\nexit code 0"

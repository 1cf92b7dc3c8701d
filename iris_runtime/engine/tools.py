"""The tool contract and registry. Tools come from plugins; the engine only runs them."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from iris_runtime.engine.provider import ToolCall, ToolSpec

log = logging.getLogger(__name__)

# The key under which a provider passes tool arguments it could not parse as JSON.
RAW_ARGUMENTS = "_raw_arguments"

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolContext:
    """What a tool may touch during one call."""

    workspace: Path
    channel_dir: Path
    abort: threading.Event
    upload_file: Callable[[str, str | None], None]
    timeout_seconds: float = 300.0
    output_max_chars: int = 30_000
    sandbox: str = "host"
    sandboxes: Mapping[str, Sandbox] = field(default_factory=dict)
    channel: str = ""
    # Progress lines for the user (≤200 chars), e.g. from a long delegated call.
    status: Callable[[str], None] = field(default=lambda text: None)
    # Wrap a wait on something remote (a sub-agent's reply) in ``with ctx.off_lane():`` so the
    # run gives its compute slot back meanwhile (see engine.lanes).
    off_lane: Callable[[], AbstractContextManager[None]] = field(default=contextlib.nullcontext)
    # Where the calling run came from: tools that act on the conversation itself (spawning a
    # background sub-agent that reports back to this chat's thread) need to know it.
    run_id: str = ""
    transport_id: str = ""
    thread: str | None = None
    model: str = ""  # the model the calling run uses ("" = the provider's own)
    # Added to the environment of the commands a tool runs (see Engine.add_tool_environment).
    env: Mapping[str, str] = field(default_factory=dict)


class Sandbox(Protocol):
    """An isolation level for commands (``iris_runtime.tools.sandbox``); opaque to the engine,
    which only hands the configured one to the tools."""


class Tool(Protocol):
    """A tool. It may also set ``kind`` (one of :data:`TOOL_KINDS`; "other" when absent), which
    transports that draw tool cards use to choose one; see :func:`tool_kind`."""

    name: str
    description: str
    parameters: dict[str, Any]

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


# ACP's tool-call categories. Optional on a tool, so tools written before kinds existed still load.
TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}
)


def tool_kind(tool: object) -> str:
    """The tool's declared kind, or "other" when it declares none (or one ACP does not know)."""
    kind = getattr(tool, "kind", "other")
    return kind if isinstance(kind, str) and kind in TOOL_KINDS else "other"


def _check_arguments(tool: Tool, args: dict[str, Any]) -> str | None:
    """A shallow JSON-schema check (required keys, primitive types, unknown keys)."""
    schema = tool.parameters
    props: dict[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in args]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    unknown = [k for k in args if k not in props]
    if unknown and not schema.get("additionalProperties", False):
        return f"unknown argument(s): {', '.join(unknown)}"
    for key, value in args.items():
        expected = props.get(key, {}).get("type")
        if expected in _JSON_TYPES:
            ok = isinstance(value, _JSON_TYPES[expected]) and not (
                expected in {"integer", "number"} and isinstance(value, bool)
            )
            if not ok:
                return f"argument {key!r} must be of type {expected}"
    return None


class ToolRegistry:
    """Tools by name. Plugins may register tools at any time, also while runs read the registry,
    so a registration replaces the whole mapping: a reader always sees one consistent set, never
    a dict changing under its iteration."""

    def __init__(self, refusals: Mapping[str, str] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._write_lock = threading.Lock()
        # Tools withheld from this registry on purpose, and what a call to one is told.
        self._refusals = dict(refusals or {})

    def register(self, tool: Tool) -> None:
        with self._write_lock:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools = {**self._tools, tool.name: tool}

    def replace(self, tool: Tool) -> None:
        """Swap the registered tool of ``tool.name`` for ``tool`` (a wrapper around it, say)."""
        with self._write_lock:
            if tool.name not in self._tools:
                raise ValueError(f"no tool {tool.name!r} to replace")
            self._tools = {**self._tools, tool.name: tool}

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def subset(
        self, keep: Callable[[str], bool], refusals: Mapping[str, str] | None = None
    ) -> ToolRegistry:
        """A registry of the tools ``keep`` accepts (by name), now; later registrations in
        this one do not reach it. A call to a name in ``refusals`` gets that message."""
        chosen = ToolRegistry(refusals)
        chosen._tools = {name: tool for name, tool in self._tools.items() if keep(name)}
        return chosen

    def kind(self, name: str) -> str:
        """The kind of the tool called ``name`` ("other" for an unknown tool)."""
        return tool_kind(self._tools.get(name))

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ToolSpec(t.name, t.description, t.parameters) for t in self._tools.values())

    def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            refusal = self._refusals.get(call.name)
            return ToolResult(refusal or f"unknown tool {call.name!r}", is_error=True)
        if not isinstance(call.arguments, dict):
            return ToolResult("tool arguments must be a JSON object", is_error=True)
        if RAW_ARGUMENTS in call.arguments:  # providers mark arguments that were not valid JSON
            raw = str(call.arguments[RAW_ARGUMENTS])[:200]
            return ToolResult(f"{call.name}: the arguments were not valid JSON: {raw}", True)
        problem = _check_arguments(tool, call.arguments)
        if problem:
            return ToolResult(f"{call.name}: {problem}", is_error=True)
        try:
            return tool.run(call.arguments, ctx)
        except Exception as exc:  # a tool bug becomes a tool error the model can see
            log.exception("tool %s failed", call.name)
            return ToolResult(f"{call.name} failed: {type(exc).__name__}: {exc}", is_error=True)

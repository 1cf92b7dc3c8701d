"""Optional permission prompts for ``iris acp`` (``--ask-permission``): before a ``bash`` or
file-writing tool call, Iris asks the editor through ``session/request_permission`` and honours
the answer. "Always" is remembered for that tool in that session.

The tool runs on an engine thread; the question goes out on the SDK's loop and the thread waits
for the answer, giving up when the run is stopped (a stopped run never runs the tool).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from typing import Any

from acp.interfaces import Client
from acp.schema import PermissionOption, ToolCallUpdate

from iris_runtime.acp.transport import CHANNEL_PREFIX
from iris_runtime.engine.tools import Tool, ToolContext, ToolRegistry, ToolResult, tool_kind

log = logging.getLogger(__name__)

GATED = ("bash", "write", "edit")
# A sub-agent's own bash/write/edit calls would run in its channel, where no editor is asked.
UNGATEABLE = ("sessions_spawn",)
SPAWN_REFUSED = (
    "sessions_spawn is off: Iris runs with --ask-permission, and a sub-agent's bash, write and "
    "edit calls could not be put to the user for permission. Do the task here instead."
)
OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]
POLL_SECONDS = 0.2


class Asker:
    """Puts the question to the editor; set ``conn`` and ``loop`` once connected."""

    def __init__(self) -> None:
        self.conn: Client | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._always: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def allowed(
        self, session_id: str, tool: str, kind: str, args: dict[str, Any], abort: threading.Event
    ) -> str | None:
        """None when allowed; otherwise why not, for the model."""
        with self._lock:
            if (session_id, tool) in self._always:
                return None
        if self.conn is None or self.loop is None:
            return "no editor is connected to ask for permission"
        question = self.conn.request_permission(
            options=OPTIONS,
            session_id=session_id,
            tool_call=ToolCallUpdate(
                tool_call_id=f"permission-{uuid.uuid4().hex[:12]}",
                title=tool,
                kind=kind,  # type: ignore[arg-type]  # one of ACP's kinds
                raw_input=args,
            ),
        )
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(question), self.loop)
        while True:
            try:
                answer = future.result(POLL_SECONDS)
                break
            except concurrent.futures.TimeoutError:
                if abort.is_set():
                    future.cancel()
                    return "the turn was stopped before the user answered"
            except Exception as exc:  # the editor failed the request
                return f"the editor could not ask for permission: {exc}"
        outcome = answer.outcome
        chosen = getattr(outcome, "option_id", None)
        log.info("acp session %s: permission for %s answered %s", session_id, tool, chosen)
        if chosen == "always":
            with self._lock:
                self._always.add((session_id, tool))
        if chosen in {"allow", "always"}:
            return None
        return "the user declined this tool call"


class GatedTool:
    """``inner`` behind the editor's permission (same name, description and parameters)."""

    def __init__(self, inner: Tool, asker: Asker) -> None:
        self._inner = inner
        self._asker = asker
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.kind = tool_kind(inner)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        channel = ctx.channel or ""
        if channel.startswith(CHANNEL_PREFIX):
            refused = self._asker.allowed(
                channel.removeprefix(CHANNEL_PREFIX), self.name, self.kind, args, ctx.abort
            )
            if refused is not None:
                return ToolResult(refused, is_error=True)
        return self._inner.run(args, ctx)


class RefusedTool:
    """``inner`` refused outright: a tool whose effects the editor could not be asked about."""

    def __init__(self, inner: Tool, why: str) -> None:
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.kind = tool_kind(inner)
        self._why = why

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(self._why, is_error=True)


def gate_tools(tools: ToolRegistry, asker: Asker) -> list[str]:
    """Put the bash and file-writing tools behind ``asker``, and refuse the tools that would run
    them where the editor is not asked (a sub-agent runs in its own channel); returns the names
    gated."""
    gated = []
    for name in GATED:
        tool = tools.get(name)
        if tool is not None:
            tools.replace(GatedTool(tool, asker))
            gated.append(name)
    for name in UNGATEABLE:
        tool = tools.get(name)
        if tool is not None:
            tools.replace(RefusedTool(tool, SPAWN_REFUSED))
    return gated


async def _as_coroutine(awaitable: Any) -> Any:
    return await awaitable

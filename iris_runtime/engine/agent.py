"""The agent loop: provider stream → tool calls → tool results → again, until a final answer.

The loop is bounded by ``max_turns`` and checks ``abort`` between every step, so a stop lands
within one provider event or one tool call. What the run produced is reported through a
:class:`RunOutput`; the loop itself knows nothing about transports or watchers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from iris_runtime.engine.provider import (
    Done,
    Message,
    Notice,
    Provider,
    ProviderError,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)
from iris_runtime.engine.tools import ToolContext, ToolRegistry, ToolResult
from iris_runtime.engine.transport import ToolEvent

SILENT_MARKER = "[SILENT]"


class RunOutput(Protocol):
    """Where a run's visible effects go (the transport context and any live watchers)."""

    def respond(self, text: str) -> None: ...
    def text_delta(self, text: str) -> None: ...
    def status(self, text: str) -> None: ...
    def thinking(self, text: str) -> None: ...
    def tool_event(self, event: ToolEvent) -> None: ...


@dataclass
class AgentOutcome:
    status: str = "done"  # done | stopped | failed | max_turns
    replies: list[str] = field(default_factory=list)
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    turn_usage: list[Usage] = field(default_factory=list)
    turns: int = 0
    silent: bool = False  # the model chose to say nothing (a reply beginning with [SILENT])


@dataclass(frozen=True)
class AgentSetup:
    """The agent a run uses instead of Iris's own: a background sub-agent brings its own system
    prompt, tools, provider (its own keys), model and thinking level. Such a run is never
    offered to the message routers: its messages are tasks for this agent, not for delegation."""

    system: str
    tools: ToolRegistry
    provider: Provider
    model: str = ""
    thinking: str = ""


@dataclass
class _Turn:
    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


class AgentLoop:
    def __init__(
        self,
        provider: Provider,
        tools: ToolRegistry,
        *,
        max_turns: int,
        model: str = "",
        thinking: str = "",
    ) -> None:
        self._provider = provider
        self._tools = tools
        self._max_turns = max_turns
        self._model = model
        self._thinking = thinking

    @classmethod
    def for_setup(cls, setup: AgentSetup, max_turns: int) -> AgentLoop:
        return cls(
            setup.provider,
            setup.tools,
            max_turns=max_turns,
            model=setup.model,
            thinking=setup.thinking,
        )

    def run(
        self,
        system: str,
        messages: list[Message],
        tool_ctx: ToolContext,
        out: RunOutput,
        abort: threading.Event,
    ) -> AgentOutcome:
        outcome = AgentOutcome()
        conversation = list(messages)
        for _ in range(self._max_turns):
            if abort.is_set():
                outcome.status = "stopped"
                return outcome
            outcome.turns += 1
            request = ProviderRequest(
                system, tuple(conversation), self._tools.specs(), self._model, self._thinking
            )
            turn = self._stream_turn(request, out, abort, outcome)
            self._deliver_text(turn, out, outcome)
            if turn.error is not None:
                outcome.status, outcome.error = "failed", turn.error
                return outcome
            if abort.is_set():
                outcome.status = "stopped"
                return outcome
            if not turn.calls:
                return outcome
            conversation.append(Message("assistant", "".join(turn.text), tuple(turn.calls)))
            conversation.extend(self._run_tools(turn.calls, tool_ctx, out, abort))
        outcome.status = "max_turns"
        outcome.error = f"stopped after {self._max_turns} model turns without a final answer"
        return outcome

    def _stream_turn(
        self,
        request: ProviderRequest,
        out: RunOutput,
        abort: threading.Event,
        outcome: AgentOutcome,
    ) -> _Turn:
        turn = _Turn()
        for event in self._provider.stream(request, abort):
            if isinstance(event, TextDelta):
                turn.text.append(event.text)
                out.text_delta(event.text)  # live; respond() still delivers the turn's text
            elif isinstance(event, ThinkingDelta):
                out.thinking(event.text)
            elif isinstance(event, ToolCallEvent):
                turn.calls.append(event.call)
            elif isinstance(event, Done):
                outcome.usage = outcome.usage + event.usage
                outcome.turn_usage.append(event.usage)
            elif isinstance(event, Notice):
                out.status(event.text)
            elif isinstance(event, ProviderError):
                turn.error = event.message
            if abort.is_set() or turn.error is not None:
                break
        return turn

    @staticmethod
    def _deliver_text(turn: _Turn, out: RunOutput, outcome: AgentOutcome) -> None:
        """Send what the model wrote this turn, partial text of an aborted stream included.

        Text beginning with [SILENT] is withheld entirely: not posted, not returned to the caller
        and not logged (the run logs an empty reply), so anything the model wrote after the
        marker is dropped with it."""
        text = "".join(turn.text).strip()
        if text.startswith(SILENT_MARKER):
            outcome.silent = True
        elif text:
            out.respond(text)
            outcome.replies.append(text)

    def _run_tools(
        self,
        calls: list[ToolCall],
        ctx: ToolContext,
        out: RunOutput,
        abort: threading.Event,
    ) -> list[Message]:
        results: list[Message] = []
        for call in calls:
            if abort.is_set():
                result = ToolResult("not run: the run was stopped", is_error=True)
            else:
                out.status(f"→ running {call.name}")
                kind = self._tools.kind(call.name)
                out.tool_event(
                    ToolEvent("start", call.call_id, call.name, call.arguments, kind=kind)
                )
                result = self._tools.execute(call, ctx)
                out.tool_event(
                    ToolEvent(
                        "end",
                        call.call_id,
                        call.name,
                        call.arguments,
                        result.text,
                        result.is_error,
                        kind,
                    )
                )
            results.append(
                Message("tool", result.text, tool_call_id=call.call_id, is_error=result.is_error)
            )
        return results

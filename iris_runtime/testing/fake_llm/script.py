"""Scripting types shared by the wire-level LLM fakes (their HTTP plumbing is in ``server.py``).

A test scripts what the "model" answers as a FIFO of :class:`Reply` objects, one per HTTP
response. A reply is a list of steps:

- :class:`Text` / :class:`Thinking`: one streamed delta each; consecutive steps of the same kind
  (possibly with a :class:`Stall` between them) extend the same content block, so
  ``[Text("Hel"), Text("lo")]`` is one text block sent as two deltas.
- :class:`ToolCall`: one tool call; its JSON arguments are streamed in a few partial pieces. A
  ``str`` argument is sent verbatim (malformed JSON included).
- :class:`Usage`: the token counts to report (its position does not matter). Without one, the fake
  reports a rough estimate (about four characters a token).
- :class:`Fail`: an HTTP error response instead of any stream; it must be the reply's only step.
- :class:`MidStreamError`, :class:`Disconnect`, :class:`Stall`: faults during the response.

Token accounting follows one convention for both APIs: ``Usage.input_tokens`` are the *uncached*
input tokens (Anthropic's meaning), ``cache_read``/``cache_write`` come on top. The Anthropic fake
reports them as ``input_tokens``/``cache_read_input_tokens``/``cache_creation_input_tokens``; the
OpenAI fake reports ``prompt_tokens = input_tokens + cache_read + cache_write`` (OpenAI counts
cached tokens inside ``prompt_tokens``) and ``prompt_tokens_details.cached_tokens = cache_read``.

``Reply.stop_reason`` may use either API's vocabulary: each fake translates the other's names
(``end_turn`` <-> ``stop``, ``max_tokens`` <-> ``length``, ``tool_use`` <-> ``tool_calls``,
``refusal`` <-> ``content_filter``) and passes unknown names through.

"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Disconnect",
    "Fail",
    "MidStreamError",
    "Reply",
    "Stall",
    "Step",
    "Text",
    "Thinking",
    "ToolCall",
    "Usage",
]


# --- scripting types -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Visible model text: one ``text_delta`` (Anthropic) / one ``delta.content`` (OpenAI)."""

    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning text. Anthropic: a ``thinking`` block (``thinking_delta``s, then a
    ``signature_delta`` before the block stops). OpenAI: see ``FakeOpenAI(reasoning_field=...)``."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call. ``arguments`` as a dict is JSON-encoded; a ``str`` is sent verbatim, so a test
    can send malformed JSON. ``id`` defaults to a fresh ``toolu_…`` / ``call_…`` id."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Usage:
    """Token counts to report. ``input_tokens`` excludes the cached ones (see module docs)."""

    input_tokens: int
    output_tokens: int
    cache_read: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class Fail:
    """An HTTP error response sent before any stream, with the error body shaped as each API shapes
    it. ``retry_after`` (seconds, may be fractional) becomes a ``retry-after`` header;
    ``should_retry`` an ``x-should-retry: true|false`` header (both SDKs obey it over the status
    code); ``code`` is OpenAI's ``error.code`` (the Anthropic fake ignores it)."""

    status: int
    error_type: str
    message: str
    retry_after: float | None = None
    code: str | None = None
    should_retry: bool | None = None


@dataclass(frozen=True)
class MidStreamError:
    """An error after the stream has started. Anthropic: an ``event: error`` SSE event, then the
    stream ends (non-streaming request: an HTTP error whose status matches ``error_type``).
    OpenAI: the connection is dropped (Chat Completions has no error event)."""

    error_type: str
    message: str


@dataclass(frozen=True)
class Disconnect:
    """Close the connection at this point, without the terminal event or the final chunk. On a
    non-streaming request: close without sending any response."""


@dataclass(frozen=True)
class Stall:
    """Send nothing for ``seconds``, keeping the connection open (cut short by ``stop()``). On a
    non-streaming request the stalls add up before the response is sent."""

    seconds: float


Step = Text | Thinking | ToolCall | Usage | Fail | MidStreamError | Disconnect | Stall
_STEP_TYPES = (Text, Thinking, ToolCall, Usage, Fail, MidStreamError, Disconnect, Stall)


@dataclass(frozen=True)
class Reply:
    """One HTTP response. ``stop_reason`` defaults to ``tool_use``/``tool_calls`` when the reply has
    a tool call, else ``end_turn``/``stop``."""

    steps: Sequence[Step]
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        for step in steps:
            if not isinstance(step, _STEP_TYPES):
                raise TypeError(f"not a script step: {step!r}")
        if any(isinstance(step, Fail) for step in steps) and len(steps) != 1:
            raise ValueError("a Fail must be the only step of its Reply")
        object.__setattr__(self, "steps", steps)

    @property
    def fail(self) -> Fail | None:
        first = self.steps[0] if self.steps else None
        return first if isinstance(first, Fail) else None

    @property
    def has_tool_calls(self) -> bool:
        return any(isinstance(step, ToolCall) for step in self.steps)

    def stop_reason_in(self, api: Literal["anthropic", "openai"]) -> str:
        """The stop reason in ``api``'s words: the scripted one (the other API's names
        translated), else the one for a reply with or without a tool call."""
        translated, tool_use, end_turn = _STOP_WORDS[api]
        if self.stop_reason is not None:
            return translated.get(self.stop_reason, self.stop_reason)
        return tool_use if self.has_tool_calls else end_turn

    def usage(self, request_body: dict[str, Any]) -> Usage:
        """The scripted :class:`Usage` (the last one wins), else an estimate."""
        scripted = [step for step in self.steps if isinstance(step, Usage)]
        if scripted:
            return scripted[-1]
        prompt = {key: request_body.get(key) for key in ("system", "messages", "tools")}
        produced = 0
        for step in self.steps:
            if isinstance(step, Text | Thinking):
                produced += len(step.text)
            elif isinstance(step, ToolCall):
                produced += len(step.name) + len(step.arguments_json())
        return Usage(max(1, len(json.dumps(prompt)) // 4), max(1, produced // 4))


DEFAULT_REPLY = Reply([Text("ok")])

ANTHROPIC_TO_OPENAI_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
OPENAI_TO_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Per API: the other API's stop reasons translated, the reason with a tool call, the one without.
_STOP_WORDS = {
    "anthropic": (OPENAI_TO_ANTHROPIC_STOP, "tool_use", "end_turn"),
    "openai": (ANTHROPIC_TO_OPENAI_STOP, "tool_calls", "stop"),
}

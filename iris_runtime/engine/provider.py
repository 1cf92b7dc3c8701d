"""The provider contract: an LLM wire protocol seen as a stream of events.

``Provider.stream`` never raises for a failed call; failures arrive as :class:`ProviderError`
events so the agent loop has one path for everything a model can do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One entry of the conversation sent to the model."""

    role: str  # "user" | "assistant" | "tool"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ProviderRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str = ""
    # A thinking level for this request ("off", "low", "medium", "high"); "" keeps the
    # provider's configured setting. Providers without a notion of thinking ignore it.
    thinking: str = ""


THINKING_LEVELS = ("off", "low", "medium", "high")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cost_usd + other.cost_usd,
        )


@dataclass(frozen=True)
class ModelPrice:
    """USD per one million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    call: ToolCall


@dataclass(frozen=True)
class Done:
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Notice:
    """Something the user should see while waiting (e.g. "retrying in 4s: overloaded")."""

    text: str


@dataclass(frozen=True)
class ProviderError:
    message: str
    retryable: bool = False


ProviderEvent = TextDelta | ThinkingDelta | ToolCallEvent | Done | Notice | ProviderError


class Provider(Protocol):
    name: str
    # Tokens the model can see at once; the engine compacts long conversations to fit.
    context_window: int

    def stream(
        self, request: ProviderRequest, abort: threading.Event
    ) -> Iterator[ProviderEvent]: ...

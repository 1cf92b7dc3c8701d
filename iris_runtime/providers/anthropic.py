"""The ``anthropic`` provider: Claude through the official SDK's streaming Messages API.

Request: the system prompt is one text block with a ``cache_control`` breakpoint (so tools and
system prompt are cached), and the last message block gets a second one (so every step of a tool
loop reads the conversation so far from the cache). Our ``tool`` messages become ``tool_result``
blocks, grouped with anything else of the user's side into one user message. ``max_tokens`` is the
model's output limit from the models table; ``IRIS_THINKING_BUDGET`` (tokens) turns on extended
thinking.

Response: the raw event stream (``messages.create(stream=True)``), not the ``messages.stream()``
helper, because the helper parses partial tool JSON as it arrives and raises on malformed JSON,
which we turn into a tool error the model can see instead (see ``retry.parse_arguments``).

Extended thinking in a tool loop requires the signed thinking blocks of the last assistant turn,
which our ``Message`` does not carry. The provider keeps them, keyed by the turn's first tool-call
id; when they are gone (a restart), that one request goes without thinking rather than failing.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field

import anthropic
import httpx2
from anthropic.types import (
    CacheControlEphemeralParam,
    ContentBlockParam,
    MessageParam,
    RawMessageStreamEvent,
    TextBlockParam,
    ThinkingConfigParam,
    ToolParam,
)

from iris_runtime.config import Settings
from iris_runtime.engine.provider import (
    Message,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)
from iris_runtime.env_values import env_number
from iris_runtime.errors import ConfigError
from iris_runtime.providers import interrupt
from iris_runtime.providers.keys import KeyResolver, env_key
from iris_runtime.providers.models import ModelInfo, resolve_model
from iris_runtime.providers.retry import (
    Failure,
    Item,
    RetryPolicy,
    connection_failure,
    parse_arguments,
)
from iris_runtime.providers.sdk_provider import RetryingProvider, finished

KEY_VAR = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"
MIN_THINKING_BUDGET = 1024
# Budgets for a request's thinking level (a sub-agent's ``thinking``), capped below the model's
# output limit.
LEVEL_BUDGETS = {"low": MIN_THINKING_BUDGET, "medium": 4096, "high": 16384}
SIGNED_TURNS_KEPT = 256
# How long the end of a response may take after its final event before the connection is
# dropped instead of reused. It normally arrives with message_stop; one that a proxy holds back
# costs at most this.
DRAIN_SECONDS = 0.02
_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}


def _blocks(message: Message) -> tuple[str, list[ContentBlockParam]]:
    """One of our messages as (side, content blocks); empty text yields no block."""
    blocks: list[ContentBlockParam] = []
    if message.role == "tool":
        content = message.text or "(no output)"
        blocks.append(
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": content,
                "is_error": message.is_error,
            }
        )
        return "user", blocks
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    if message.role != "assistant":
        return "user", blocks
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}
        )
    return "assistant", blocks


def _conversation(
    messages: tuple[Message, ...], signed: Mapping[int, list[ContentBlockParam]]
) -> list[MessageParam]:
    """Our messages as API messages: consecutive ones of one side merged (tool results first,
    as they are in our history), signed thinking blocks put back, a cache breakpoint last."""
    groups: list[tuple[str, list[ContentBlockParam]]] = []
    for index, message in enumerate(messages):
        role, blocks = _blocks(message)
        blocks = [*signed.get(index, []), *blocks]
        if not blocks:
            continue  # the API rejects empty content
        if groups and groups[-1][0] == role:
            groups[-1][1].extend(blocks)
        else:
            groups.append((role, blocks))
    if groups:
        last = groups[-1][1][-1]
        if last["type"] in ("text", "tool_result", "tool_use"):
            last["cache_control"] = _EPHEMERAL
    out: list[MessageParam] = []
    for role, blocks in groups:
        out.append(
            {"role": "assistant", "content": blocks}
            if role == "assistant"
            else {"role": "user", "content": blocks}
        )
    return out


class _SignedTurns:
    """Thinking blocks of recent tool-calling turns, by the turn's first tool-call id."""

    def __init__(self, size: int = SIGNED_TURNS_KEPT) -> None:
        self._size = size
        self._turns: OrderedDict[str, list[ContentBlockParam]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, call_id: str, blocks: list[ContentBlockParam]) -> None:
        with self._lock:
            self._turns[call_id] = blocks
            while len(self._turns) > self._size:
                self._turns.popitem(last=False)

    def get(self, call_id: str) -> list[ContentBlockParam] | None:
        with self._lock:
            return self._turns.get(call_id)


@dataclass(frozen=True)
class _Call:
    model: ModelInfo
    system: list[TextBlockParam]
    messages: list[MessageParam]
    tools: list[ToolParam]
    thinking: ThinkingConfigParam | None


@dataclass
class _Reply:
    """What one response has streamed so far."""

    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "end_turn"
    tools: dict[int, tuple[str, str, list[str]]] = field(default_factory=dict)
    thinking: dict[int, ContentBlockParam] = field(default_factory=dict)
    call_ids: list[str] = field(default_factory=list)

    def on(self, event: RawMessageStreamEvent) -> Iterator[ProviderEvent]:
        if event.type == "message_start":
            start = event.message.usage
            self.usage = Usage(
                start.input_tokens,
                start.output_tokens,
                start.cache_read_input_tokens or 0,
                start.cache_creation_input_tokens or 0,
            )
        elif event.type == "content_block_start":
            yield from self._open(event.index, event.content_block)
        elif event.type == "content_block_delta":
            yield from self._delta(event.index, event.delta)
        elif event.type == "content_block_stop" and event.index in self.tools:
            call_id, name, pieces = self.tools.pop(event.index)
            self.call_ids.append(call_id)
            yield ToolCallEvent(ToolCall(call_id, name, parse_arguments("".join(pieces))))
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            # Counts on message_delta are cumulative; absent ones keep the message_start value.
            new, old = event.usage, self.usage
            self.usage = Usage(
                old.input_tokens if new.input_tokens is None else new.input_tokens,
                new.output_tokens,
                new.cache_read_input_tokens or old.cache_read_tokens,
                new.cache_creation_input_tokens or old.cache_write_tokens,
            )

    def _open(self, index: int, block: anthropic.types.ContentBlock) -> Iterator[ProviderEvent]:
        if block.type == "text" and block.text:
            yield TextDelta(block.text)
        elif block.type == "tool_use":
            self.tools[index] = (block.id, block.name, [])
        elif block.type == "thinking":
            self.thinking[index] = {
                "type": "thinking",
                "thinking": block.thinking,
                "signature": block.signature,
            }
        elif block.type == "redacted_thinking":
            self.thinking[index] = {"type": "redacted_thinking", "data": block.data}

    def _delta(
        self, index: int, delta: anthropic.types.RawContentBlockDelta
    ) -> Iterator[ProviderEvent]:
        if delta.type == "text_delta":
            yield TextDelta(delta.text)
        elif delta.type == "input_json_delta" and index in self.tools:
            self.tools[index][2].append(delta.partial_json)
        elif delta.type == "thinking_delta":
            block = self.thinking.get(index)
            if block is not None and block["type"] == "thinking":
                block["thinking"] += delta.thinking
            yield ThinkingDelta(delta.thinking)
        elif delta.type == "signature_delta":
            block = self.thinking.get(index)
            if block is not None and block["type"] == "thinking":
                block["signature"] = delta.signature


def _read_to_end(events: Iterator[RawMessageStreamEvent]) -> None:
    """Read what follows ``message_stop`` (normally only the end of the body, sent with it), so
    the connection goes back to the pool instead of being closed and opened again next turn.
    Never for long (``DRAIN_SECONDS``), and never for a call whose waits nothing bounds; what
    goes wrong here is not reported: the answer is complete."""
    if not interrupt.within(DRAIN_SECONDS):
        return
    with contextlib.suppress(Exception):
        for _ in events:
            pass


class AnthropicProvider(RetryingProvider[anthropic.Anthropic, _Call]):
    name = "anthropic"
    client_class = anthropic.Anthropic

    def __init__(
        self,
        settings: Settings,
        model: ModelInfo,
        key: KeyResolver,
        *,
        base_url: str = DEFAULT_BASE_URL,
        thinking_budget: int | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(settings, model, key, base_url, retry_policy)
        self.thinking_budget = thinking_budget
        self._signed = _SignedTurns()

    def prepare(self, request: ProviderRequest, model: ModelInfo) -> _Call:
        thinking, signed = self._thinking(request.messages, self._budget(request.thinking, model))
        system: list[TextBlockParam] = []
        if request.system:
            system.append({"type": "text", "text": request.system, "cache_control": _EPHEMERAL})
        tools: list[ToolParam] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        return _Call(model, system, _conversation(request.messages, signed), tools, thinking)

    def _budget(self, level: str, model: ModelInfo) -> int | None:
        """The thinking budget for a request's level ("" keeps IRIS_THINKING_BUDGET)."""
        if not level:
            return self.thinking_budget
        budget = LEVEL_BUDGETS.get(level)
        if budget is None or model.max_output_tokens <= MIN_THINKING_BUDGET:
            return None  # "off", or a model with no room to think
        return min(budget, model.max_output_tokens - 1)

    def _thinking(
        self, messages: tuple[Message, ...], budget: int | None
    ) -> tuple[ThinkingConfigParam | None, dict[int, list[ContentBlockParam]]]:
        """The thinking setting, and the signed blocks to put back into the conversation."""
        if budget is None:
            return None, {}
        thinking: ThinkingConfigParam = {"type": "enabled", "budget_tokens": budget}
        last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=None)
        if last is None or not messages[last].tool_calls:
            return thinking, {}
        blocks = self._signed.get(messages[last].tool_calls[0].call_id)
        if blocks is None:  # mid tool loop without the signed blocks: the API would refuse
            return None, {}
        return thinking, {last: blocks}

    def attempt(self, client: anthropic.Anthropic, call: _Call) -> Generator[Item, None, None]:
        try:
            yield from self._reply(client, call)
        except anthropic.APIStatusError as exc:
            yield self.http_failure(exc, exc.api_message or exc.message)
        except (anthropic.APIConnectionError, httpx2.TransportError) as exc:  # timeouts included
            yield connection_failure(exc, timeout=self.timeout)
        except (anthropic.APIError, ValueError) as exc:  # undecodable event data
            yield Failure("malformed response", True, str(exc))

    def _reply(self, client: anthropic.Anthropic, call: _Call) -> Generator[Item, None, None]:
        reply = _Reply()
        with client.messages.create(
            model=call.model.id,
            max_tokens=call.model.max_output_tokens,
            system=call.system or anthropic.omit,
            messages=call.messages,
            tools=call.tools or anthropic.omit,
            thinking=call.thinking or anthropic.omit,
            stream=True,
        ) as events:
            for event in events:
                if event.type != "message_stop":
                    yield from reply.on(event)
                    continue
                if reply.call_ids and reply.thinking:  # before Done: the next turn needs them
                    self._signed.put(reply.call_ids[0], list(reply.thinking.values()))
                yield finished(reply.stop_reason, reply.usage, call.model)
                _read_to_end(events)
                return
        yield Failure("stream ended without a final event", True)


def _thinking_budget(settings: Settings, model: ModelInfo) -> int | None:
    if not settings.env.get("IRIS_THINKING_BUDGET", "").strip():
        return None
    budget = env_number(
        settings.env, "IRIS_THINKING_BUDGET", 0, minimum=MIN_THINKING_BUDGET, kind=int
    )
    if budget >= model.max_output_tokens:
        raise ConfigError(
            f"IRIS_THINKING_BUDGET must be below {model.id}'s output limit "
            f"({model.max_output_tokens}), got {budget}"
        )
    return budget


def create(settings: Settings) -> AnthropicProvider:
    """Resolve the model now (an unknown one is a start-up error); the key only at first use."""
    base_url = settings.env.get("ANTHROPIC_BASE_URL", "").strip() or DEFAULT_BASE_URL
    model = resolve_model(settings, "anthropic", base_url)
    return AnthropicProvider(
        settings,
        model,
        env_key(settings, KEY_VAR),
        base_url=base_url,
        thinking_budget=_thinking_budget(settings, model),
    )

"""The ``openai`` provider: OpenAI or any OpenAI-compatible server, via the official SDK's
streaming Chat Completions API.

Dialect ("compat") flags start from the base URL: api.openai.com (or no base URL) gets the official
dialect; any other host, a local server (Ollama, vLLM, llama.cpp, LM Studio) included, gets the
conservative one most servers accept. A model's ``compat`` entry in the models table overrides
either (``models.yaml`` documents the flags).

- ``strict_tools`` is off by default everywhere: strict mode needs every property required and
  ``additionalProperties: false`` at every level, which our tool schemas with optional arguments
  do not satisfy; the ToolRegistry validates arguments anyway.
- Chat Completions has no error flag on tool results, so an error result is prefixed ``Error:``.
- Reasoning text that local servers stream (``delta.reasoning_content`` or ``delta.reasoning``)
  becomes :class:`ThinkingDelta`.
- ``prompt_tokens`` includes cached tokens; we report the uncached part as ``input_tokens`` and
  the cached part as ``cache_read_tokens`` (the convention the price table uses). A server that
  sends no usage yields zeros.
- A local server needs no key: without ``OPENAI_API_KEY`` a placeholder is sent.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import cast
from urllib.parse import urlparse

import httpx2
import openai
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
from openai.types.shared import ReasoningEffort

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
from iris_runtime.errors import ConfigError
from iris_runtime.providers.keys import KeyResolver, OptionalKey, env_key
from iris_runtime.providers.models import ModelInfo, is_local_url, resolve_model
from iris_runtime.providers.retry import (
    Failure,
    Item,
    RetryPolicy,
    connection_failure,
    parse_arguments,
    stream_error_failure,
)
from iris_runtime.providers.sdk_provider import RetryingProvider, finished

log = logging.getLogger(__name__)

KEY_VAR = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "not-needed"
TOKEN_FIELDS = ("max_completion_tokens", "max_tokens")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


@dataclass(frozen=True)
class Compat:
    developer_role: bool = False
    max_tokens_field: str = "max_tokens"
    strict_tools: bool = False
    reasoning_effort: bool = False
    stream_usage: bool = True


OFFICIAL = Compat(developer_role=True, max_tokens_field="max_completion_tokens")
OTHER_SERVER = Compat()


def is_official(base_url: str | None) -> bool:
    host = (urlparse(base_url).hostname or "").lower() if base_url else "api.openai.com"
    return host == "openai.com" or host.endswith(".openai.com")


def detect_compat(base_url: str | None, model: ModelInfo) -> Compat:
    """The base URL's dialect, then the model's own ``compat`` entry on top."""
    compat = OFFICIAL if is_official(base_url) else OTHER_SERVER
    for flag in fields(Compat):
        value = model.compat.get(flag.name)
        if value is None:
            continue
        valid = value in TOKEN_FIELDS if flag.name == "max_tokens_field" else type(value) is bool
        if not valid:
            raise ConfigError(f"models.{model.id}.compat.{flag.name}: invalid value {value!r}")
        compat = replace(compat, **{flag.name: value})
    return compat


def _message(message: Message) -> ChatCompletionMessageParam:
    if message.role == "tool":
        text = f"Error: {message.text}" if message.is_error else message.text
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}
    if message.role != "assistant":
        return {"role": "user", "content": message.text}
    out: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        out["content"] = message.text or None
        out["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return out


def _messages(request: ProviderRequest, compat: Compat) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system and compat.developer_role:
        out.append({"role": "developer", "content": request.system})
    elif request.system:
        out.append({"role": "system", "content": request.system})
    out.extend(_message(message) for message in request.messages)
    return out


def _tools(request: ProviderRequest, compat: Compat) -> list[ChatCompletionFunctionToolParam]:
    tools: list[ChatCompletionFunctionToolParam] = []
    for spec in request.tools:
        tool: ChatCompletionFunctionToolParam = {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        if compat.strict_tools:  # picky servers reject the key itself, even when false
            tool["function"]["strict"] = True
        tools.append(tool)
    return tools


def _usage(usage: CompletionUsage) -> Usage:
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(max(0, usage.prompt_tokens - cached), usage.completion_tokens, cached, 0)


def _reasoning(delta: ChoiceDelta) -> str:
    for name in ("reasoning_content", "reasoning"):  # not in the API: kept as extra fields
        value = getattr(delta, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


@dataclass
class _PendingCall:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Reply:
    """What one response has streamed so far. Tool calls arrive in pieces, by index, and are
    handed over once the stream is complete."""

    calls: dict[int, _PendingCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def on(self, chunk: ChatCompletionChunk) -> Iterator[ProviderEvent]:
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices:
            if choice.index != 0:  # we ask for one choice; ignore any extra
                continue
            reasoning = _reasoning(choice.delta)
            if reasoning:
                yield ThinkingDelta(reasoning)
            if choice.delta.content:
                yield TextDelta(choice.delta.content)
            for part in choice.delta.tool_calls or ():
                self._add(part)
            self.finish_reason = choice.finish_reason or self.finish_reason

    def _add(self, part: ChoiceDeltaToolCall) -> None:
        pending = self.calls.setdefault(part.index, _PendingCall())
        pending.call_id = pending.call_id or part.id or ""
        if part.function is not None:
            pending.name = pending.name or part.function.name or ""
            pending.arguments.append(part.function.arguments or "")

    def tool_calls(self) -> Iterator[ToolCallEvent]:
        for index in sorted(self.calls):
            pending = self.calls[index]
            call_id = pending.call_id or f"call_{uuid.uuid4().hex[:24]}"  # some servers omit it
            arguments = parse_arguments("".join(pending.arguments))
            yield ToolCallEvent(ToolCall(call_id, pending.name, arguments))


@dataclass(frozen=True)
class _Call:
    model: ModelInfo
    compat: Compat
    messages: list[ChatCompletionMessageParam]
    tools: list[ChatCompletionFunctionToolParam]
    effort: ReasoningEffort = None


class OpenAIProvider(RetryingProvider[openai.OpenAI, _Call]):
    name = "openai"
    client_class = openai.OpenAI

    def __init__(
        self,
        settings: Settings,
        model: ModelInfo,
        key: KeyResolver,
        *,
        base_url: str = DEFAULT_BASE_URL,
        compat: Compat | None = None,
        reasoning_effort: ReasoningEffort = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(settings, model, key, base_url, retry_policy)
        self.compat = compat  # None: detected per model
        self.reasoning_effort = reasoning_effort

    def prepare(self, request: ProviderRequest, model: ModelInfo) -> _Call:
        compat = self.compat or detect_compat(self.base_url, model)
        effort = self.reasoning_effort
        if request.thinking:  # a per-request level (a sub-agent's) wins over the setting
            level = "none" if request.thinking == "off" else request.thinking
            effort = cast(ReasoningEffort, level)
        messages, tools = _messages(request, compat), _tools(request, compat)
        return _Call(model, compat, messages, tools, effort if compat.reasoning_effort else None)

    def attempt(self, client: openai.OpenAI, call: _Call) -> Generator[Item, None, None]:
        try:
            yield from self._reply(client, call)
        except openai.APIStatusError as exc:
            yield self.http_failure(exc, _detail(exc))
        except (openai.APIConnectionError, httpx2.TransportError) as exc:  # timeouts included
            yield connection_failure(exc, timeout=self.timeout)
        except openai.APIError as exc:  # an error object inside the stream
            yield stream_error_failure(exc.type, _detail(exc))
        except ValueError as exc:  # undecodable chunk
            yield Failure("malformed response", True, str(exc))

    def _reply(self, client: openai.OpenAI, call: _Call) -> Generator[Item, None, None]:
        compat, limit, reply = call.compat, call.model.max_output_tokens, _Reply()
        tokens_field = compat.max_tokens_field
        with client.chat.completions.create(
            model=call.model.id,
            messages=call.messages,
            tools=call.tools or openai.omit,
            stream=True,
            stream_options={"include_usage": True} if compat.stream_usage else openai.omit,
            max_completion_tokens=limit if tokens_field == "max_completion_tokens" else openai.omit,
            max_tokens=limit if tokens_field == "max_tokens" else openai.omit,
            reasoning_effort=call.effort or openai.omit,
        ) as chunks:
            for chunk in chunks:
                yield from reply.on(chunk)
        if reply.finish_reason is None:
            yield Failure("stream ended without a final event", True)
            return
        yield from reply.tool_calls()
        stop_reason = STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
        yield finished(stop_reason, reply.usage, call.model)


def _detail(exc: openai.APIError) -> str:
    """The server's message without the SDK's "Error code: …" wrapping."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) and message else exc.message


def _reasoning_effort(settings: Settings) -> ReasoningEffort:
    raw = settings.env.get("IRIS_REASONING_EFFORT", "").strip().lower()
    if not raw:
        return None
    if raw not in REASONING_EFFORTS:
        raise ConfigError(f"IRIS_REASONING_EFFORT must be one of {', '.join(REASONING_EFFORTS)}")
    return cast(ReasoningEffort, raw)


def create(settings: Settings) -> OpenAIProvider:
    """Resolve the model and dialect now (mistakes are start-up errors); the key only at use."""
    env = settings.env
    base_url = (
        env.get("IRIS_OPENAI_BASE_URL", "").strip()
        or env.get("OPENAI_BASE_URL", "").strip()
        or DEFAULT_BASE_URL
    )
    model = resolve_model(settings, "openai", base_url)
    compat = detect_compat(base_url, model)  # a bad compat flag is a start-up error
    effort = _reasoning_effort(settings)
    if effort and not compat.reasoning_effort:
        log.warning(
            "IRIS_REASONING_EFFORT is ignored for %s: set compat.reasoning_effort: true for it "
            "in models.yaml if it takes one",
            model.id,
        )
    key = env_key(settings, KEY_VAR)
    if is_local_url(base_url):
        key = OptionalKey(key, LOCAL_PLACEHOLDER_KEY)
    return OpenAIProvider(settings, model, key, base_url=base_url, reasoning_effort=effort)

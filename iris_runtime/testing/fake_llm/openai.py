"""``FakeOpenAI``: a loopback fake of the OpenAI Chat Completions API for the real ``openai`` SDK.

Usage::

    with FakeOpenAI() as fake:
        fake.enqueue(Reply([Text("Hi"), ToolCall("ls", {"path": "."})]))
        client = openai.OpenAI(api_key="test-key", base_url=fake.base_url, max_retries=0)
        stream = client.chat.completions.create(
            model="gpt-x", messages=[...], stream=True, stream_options={"include_usage": True}
        )

Faithful to the wire format the SDK parses:

- ``POST /v1/chat/completions`` with ``Authorization: Bearer <key>`` (missing: 401 with
  ``code: null``; wrong: 401 ``invalid_api_key``); ``model``/``messages`` required and
  ``stream_options`` only with ``stream`` (400 ``invalid_request_error``); other paths 404. Error
  bodies are ``{"error": {"message", "type", "param", "code"}}``; every response has an
  ``x-request-id`` header.
- ``"stream": true``: ``data: {chat.completion.chunk}`` lines over a chunked body. The first chunk
  carries ``delta.role``; text is ``delta.content``; a tool call is a ``delta.tool_calls`` entry
  with ``index``, ``id``, ``type`` and ``function.name`` (arguments ``""``), then entries with only
  ``index`` and a piece of ``function.arguments``; then a chunk with an empty delta and
  ``finish_reason``; with ``stream_options.include_usage`` every chunk has ``"usage": null`` and a
  last chunk has ``"choices": []`` and the usage; then ``data: [DONE]``.
- Otherwise a full ``chat.completion`` with ``message.content`` / ``message.tool_calls`` and usage.
- :class:`~.script.Fail`: its status, the error body, ``retry-after`` / ``x-should-retry``.

Choices specific to this fake:

- :class:`~.script.Thinking` is what OpenAI-compatible local servers stream: a
  ``delta.reasoning_content`` (DeepSeek, llama.cpp, older vLLM). Pass
  ``reasoning_field="reasoning"`` for newer vLLM / Ollama / OpenRouter, or ``None`` to drop it as
  api.openai.com does (its Chat Completions never streams reasoning). The SDK keeps the unknown
  field as an extra attribute: ``getattr(chunk.choices[0].delta, "reasoning_content", None)``.
- :class:`~.script.MidStreamError` drops the connection (Chat Completions has no error event).
- ``strict_local=True`` answers like a picky local server: 400 (vLLM-style body, ``type``
  ``BadRequestError``, ``code`` 400, ``param`` naming the culprit) for a ``developer`` role
  message, a ``max_completion_tokens`` field, ``strict`` in a tool's function schema, or
  ``reasoning_effort``.

Simplified: the model is echoed; token counts are scripted or estimated; one choice (``n`` is
ignored); no logprobs, audio, refusals or moderation; no other endpoint (the Responses API,
embeddings, models).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from iris_runtime.testing.fake_llm.script import (
    Fail,
    MidStreamError,
    Reply,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from iris_runtime.testing.fake_llm.server import (
    FAKE_API_KEY,
    Exchange,
    FakeLLMServer,
    compact_json,
    pieces,
    random_id,
    retry_headers,
)

__all__ = ["FakeOpenAI"]

_MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header "
    "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank "
    "username) if you're accessing the API from your browser and are prompted for a username and "
    "password. You can obtain an API key from https://platform.openai.com/account/api-keys."
)


def _masked(key: str) -> str:
    return key[:3] + "*" * max(0, len(key) - 7) + key[-4:] if len(key) > 8 else "*" * len(key)


def _usage(usage: Usage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read + usage.cache_write
    details: dict[str, int] = {"cached_tokens": usage.cache_read, "audio_tokens": 0}
    if usage.cache_write:
        details["cache_write_tokens"] = usage.cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class FakeOpenAI(FakeLLMServer):
    """A fake OpenAI Chat Completions API on 127.0.0.1. ``base_url`` is
    ``http://127.0.0.1:<port>/v1``."""

    base_path = "/v1"

    def __init__(
        self,
        api_key: str = FAKE_API_KEY,
        *,
        strict_local: bool = False,
        reasoning_field: str | None = "reasoning_content",
    ) -> None:
        super().__init__(api_key)
        self.strict_local = strict_local
        self.reasoning_field = reasoning_field

    # --- errors

    def _error(
        self,
        exchange: Exchange,
        status: int,
        message: str,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
        exchange.send_json(status, body, {"x-request-id": self._request_id(), **(headers or {})})

    def send_fail(self, exchange: Exchange, fail: Fail) -> None:
        headers = retry_headers(fail)
        self._error(
            exchange, fail.status, fail.message, fail.error_type, code=fail.code, headers=headers
        )

    @staticmethod
    def _request_id() -> str:
        return "req_" + secrets.token_hex(16)

    def _local_rejection(self, body: dict[str, Any]) -> tuple[str, str] | None:
        """(param, message) of what a picky local server refuses, if anything."""
        for i, message in enumerate(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "developer":
                return (
                    f"messages.{i}.role",
                    f"Unexpected message role 'developer' in messages[{i}]: expected one of "
                    "'system', 'user', 'assistant', 'tool'",
                )
        for name in ("max_completion_tokens", "reasoning_effort"):
            if name in body:
                return name, f"Unrecognized request argument supplied: {name}"
        for i, tool in enumerate(body.get("tools") or []):
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and "strict" in function:
                return (
                    f"tools.{i}.function.strict",
                    f"Unrecognized field 'strict' in tools[{i}].function",
                )
        return None

    # --- what the API refuses

    def accepted_body(self, exchange: Exchange) -> dict[str, Any] | None:
        if exchange.method != "POST" or exchange.path != "/v1/chat/completions":
            message = f"Invalid URL ({exchange.method} {exchange.path})"
            self._error(exchange, 404, message)
            return None
        authorization = exchange.headers.get("authorization", "")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            self._error(exchange, 401, _MISSING_KEY)
            return None
        key = key.strip()
        if key != self.api_key:
            message = (
                f"Incorrect API key provided: {_masked(key)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys."
            )
            self._error(exchange, 401, message, code="invalid_api_key")
            return None
        body = exchange.body
        if not isinstance(body, dict):
            message = (
                "We could not parse the JSON body of your request. (HINT: This likely means you "
                "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
                "but what was sent was not valid JSON."
            )
            self._error(exchange, 400, message)
            return None
        if "model" not in body:
            self._error(exchange, 400, "you must provide a model parameter")
            return None
        if "messages" not in body:
            message = "Missing required parameter: 'messages'."
            self._error(exchange, 400, message, param="messages", code="missing_required_parameter")
            return None
        if body.get("stream_options") is not None and not body.get("stream"):
            message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
            self._error(exchange, 400, message, param="stream_options")
            return None
        if self.strict_local:
            rejection = self._local_rejection(body)
            if rejection is not None:
                param, message = rejection
                self._error(exchange, 400, message, "BadRequestError", param=param, code=400)
                return None
        return body

    # --- shapes

    @staticmethod
    def _envelope(kind: str, model: str) -> dict[str, Any]:
        return {
            "id": random_id("chatcmpl-", 29),
            "object": kind,
            "created": int(time.time()),
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_" + secrets.token_hex(5),
        }

    # --- non-streaming

    def send_whole(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        text: list[str] = []
        reasoning: list[str] = []
        tool_calls: list[dict[str, Any]] = []
        for step in reply.steps:
            if exchange.perform(step):
                continue
            if isinstance(step, Text):
                text.append(step.text)
            elif isinstance(step, Thinking):
                reasoning.append(step.text)
            elif isinstance(step, ToolCall):
                tool_calls.append(
                    {
                        "id": step.id or random_id("call_", 24),
                        "type": "function",
                        "function": {"name": step.name, "arguments": step.arguments_json()},
                    }
                )
            elif isinstance(step, MidStreamError):  # Chat Completions has no error event
                exchange.disconnect()
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(text) if text else None,
            "refusal": None,
            "annotations": [],
        }
        if reasoning and self.reasoning_field:
            message[self.reasoning_field] = "".join(reasoning)
        if tool_calls:
            message["tool_calls"] = tool_calls
        completion = {
            **self._envelope("chat.completion", str(body["model"])),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.stop_reason_in("openai"),
                }
            ],
            "usage": _usage(reply.usage(body)),
        }
        exchange.send_json(200, completion, {"x-request-id": self._request_id()})

    # --- streaming

    def send_stream(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        envelope = self._envelope("chat.completion.chunk", str(body["model"]))
        if include_usage:
            envelope["usage"] = None

        def send(payload: dict[str, Any]) -> None:
            exchange.send_chunk(b"data: %s\n\n" % compact_json(payload))

        def choice(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            entry = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            send({**envelope, "choices": [entry]})

        role_sent = False

        def announce_role() -> None:
            nonlocal role_sent
            if not role_sent:
                choice({"role": "assistant", "content": "", "refusal": None})
                role_sent = True

        exchange.begin_stream({"x-request-id": self._request_id()})
        tool_index = -1
        for step in reply.steps:
            if exchange.perform(step):
                continue
            if isinstance(step, Text):
                announce_role()
                choice({"content": step.text})
            elif isinstance(step, Thinking):
                if self.reasoning_field:
                    announce_role()
                    choice({self.reasoning_field: step.text})
            elif isinstance(step, ToolCall):
                tool_index += 1
                start: dict[str, Any] = {
                    "index": tool_index,
                    "id": step.id or random_id("call_", 24),
                    "type": "function",
                    "function": {"name": step.name, "arguments": ""},
                }
                if role_sent:
                    choice({"tool_calls": [start]})
                else:
                    choice({"role": "assistant", "content": None, "tool_calls": [start]})
                    role_sent = True
                for piece in pieces(step.arguments_json()):
                    call = {"index": tool_index, "function": {"arguments": piece}}
                    choice({"tool_calls": [call]})
            elif isinstance(step, MidStreamError):  # Chat Completions has no error event
                exchange.disconnect()
        announce_role()
        choice({}, reply.stop_reason_in("openai"))
        if include_usage:
            send({**envelope, "choices": [], "usage": _usage(reply.usage(body))})
        exchange.send_chunk(b"data: [DONE]\n\n")
        exchange.end_stream()

"""``FakeAnthropic``: a loopback fake of the Anthropic Messages API for the real ``anthropic`` SDK.

Usage::

    with FakeAnthropic() as fake:
        fake.enqueue(Reply([Thinking("hmm"), Text("Hi"), ToolCall("ls", {"path": "."})]))
        client = anthropic.Anthropic(api_key="test-key", base_url=fake.base_url, max_retries=0)
        with client.messages.stream(model="claude-x", max_tokens=100, messages=[...]) as stream:
            message = stream.get_final_message()

Faithful to the wire format the SDK parses:

- ``POST /v1/messages``; the key is checked, from ``x-api-key`` or ``Authorization: Bearer``
  (which is how the 2.x SDK sends ``api_key``): missing or wrong, 401 ``authentication_error``;
  ``anthropic-version`` header and ``model``/``max_tokens``/``messages`` required (400
  ``invalid_request_error``); other paths 404 ``not_found_error``. Every error body is
  ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`` and every
  response has a ``request-id`` header.
- ``"stream": true``: SSE with ``event:``/``data:`` lines over a chunked body: ``message_start``
  (usage with ``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``),
  ``content_block_start``/``content_block_delta``/``content_block_stop`` for ``text``
  (``text_delta``), ``thinking`` (``thinking_delta`` then ``signature_delta``) and ``tool_use``
  (an empty ``input_json_delta`` then the JSON in a few pieces), one ``ping`` after the first block
  starts, ``message_delta`` (``stop_reason``, ``usage.output_tokens``) and ``message_stop``.
- Otherwise a full ``Message`` JSON with the same blocks.
- :class:`~.script.Fail` answers with its status, the error body and ``retry-after`` /
  ``x-should-retry`` headers; :class:`~.script.MidStreamError` is an ``event: error`` SSE event
  after which the stream ends.

Simplified: the model is echoed from the request; token counts are scripted or estimated; the
thinking signature is a hash of the thinking text, not a real signature; no prompt validation beyond
the required fields; no other endpoint (count_tokens, batches, models); the ``anthropic-version``
value is not checked; the 401 message for a wrong Bearer token is a guess (the one for a wrong
``x-api-key``, ``invalid x-api-key``, is the API's).
"""

from __future__ import annotations

import base64
import hashlib
import json
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
    Exchange,
    FakeLLMServer,
    compact_json,
    pieces,
    random_id,
    retry_headers,
)

__all__ = ["ERROR_STATUS", "FakeAnthropic"]

ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "conflict_error": 409,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status the API pairs with each ``error.type``."""


def _signature(thinking: str) -> str:
    digest = hashlib.sha256(b"fake-anthropic-thinking:" + thinking.encode()).digest()
    return base64.b64encode(digest * 3).decode()


def _tool_input(call: ToolCall) -> Any:
    """The ``input`` of a non-streamed ``tool_use`` block. A ``str`` argument that is not a JSON
    object is passed through as the raw string (the real API never sends one)."""
    if not isinstance(call.arguments, str):
        return call.arguments
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return call.arguments
    return parsed if isinstance(parsed, dict) else call.arguments


class FakeAnthropic(FakeLLMServer):
    """A fake Anthropic Messages API on 127.0.0.1. ``base_url`` is ``http://127.0.0.1:<port>``."""

    base_path = ""

    def iris_env(self) -> dict[str, str]:
        """Environment for an Iris whose model is served by this fake."""
        return {
            "IRIS_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.base_url,
        }

    def system_text(self, request: int = 0) -> str:
        """The system prompt of the ``request``-th request, its blocks joined."""
        return "".join(block["text"] for block in self.requests[request]["body"]["system"])

    # --- errors

    def _error(
        self,
        exchange: Exchange,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        request_id = random_id("req_01", 22)
        body = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id,
        }
        exchange.send_json(status, body, {"request-id": request_id, **(headers or {})})

    def send_fail(self, exchange: Exchange, fail: Fail) -> None:
        self._error(exchange, fail.status, fail.error_type, fail.message, retry_headers(fail))

    def _credentials_problem(self, headers: dict[str, str]) -> str | None:
        """Why the request is not authenticated, or None. The SDK sends ``api_key`` as
        ``Authorization: Bearer`` (2.x); older SDKs and curl send ``x-api-key``."""
        key = headers.get("x-api-key")
        if key is not None:
            return None if key == self.api_key else "invalid x-api-key"
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return None if token.strip() == self.api_key else "invalid bearer token"
        return "x-api-key header is required"

    # --- what the API refuses

    def accepted_body(self, exchange: Exchange) -> dict[str, Any] | None:
        if exchange.method != "POST" or exchange.path != "/v1/messages":
            self._error(exchange, 404, "not_found_error", "Not Found")
            return None
        problem = self._credentials_problem(exchange.headers)
        if problem is not None:
            self._error(exchange, 401, "authentication_error", problem)
            return None
        if "anthropic-version" not in exchange.headers:
            message = "anthropic-version: header is required"
            self._error(exchange, 400, "invalid_request_error", message)
            return None
        body = exchange.body
        if not isinstance(body, dict):
            message = "The request body is not valid JSON."
            self._error(exchange, 400, "invalid_request_error", message)
            return None
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                self._error(exchange, 400, "invalid_request_error", f"{name}: Field required")
                return None
        return body

    # --- shapes

    @staticmethod
    def _usage(usage: Usage, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cache_read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    # --- non-streaming

    def send_whole(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        content: list[dict[str, Any]] = []
        for step in reply.steps:
            last = content[-1] if content else None
            if exchange.perform(step):
                continue
            if isinstance(step, Text):
                if last is not None and last["type"] == "text":
                    last["text"] += step.text
                else:
                    content.append({"type": "text", "text": step.text})
            elif isinstance(step, Thinking):
                if last is not None and last["type"] == "thinking":
                    last["thinking"] += step.text
                else:
                    content.append({"type": "thinking", "thinking": step.text, "signature": ""})
            elif isinstance(step, ToolCall):
                content.append(
                    {
                        "type": "tool_use",
                        "id": step.id or random_id("toolu_01", 22),
                        "name": step.name,
                        "input": _tool_input(step),
                    }
                )
            elif isinstance(step, MidStreamError):
                status = ERROR_STATUS.get(step.error_type, 500)
                self._error(exchange, status, step.error_type, step.message)
                return
        for block in content:
            if block["type"] == "thinking":
                block["signature"] = _signature(block["thinking"])
        usage = reply.usage(body)
        message_id = random_id("msg_01", 22)
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": reply.stop_reason_in("anthropic"),
            "stop_sequence": None,
            "usage": self._usage(usage, usage.output_tokens),
        }
        exchange.send_json(200, message, {"request-id": random_id("req_01", 22)})

    # --- streaming

    def send_stream(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        usage = reply.usage(body)

        def send(event: str, data: dict[str, Any]) -> None:
            exchange.send_chunk(b"event: %s\ndata: %s\n\n" % (event.encode(), compact_json(data)))

        exchange.begin_stream({"request-id": random_id("req_01", 22)})
        send(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": random_id("msg_01", 22),
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": self._usage(usage, 1),
                },
            },
        )

        index = -1
        open_kind: str | None = None
        thinking = ""
        pinged = False

        def start(block: dict[str, Any]) -> None:
            nonlocal index, open_kind, pinged
            close()
            index += 1
            open_kind = block["type"]
            event = {"type": "content_block_start", "index": index, "content_block": block}
            send("content_block_start", event)
            if not pinged:
                send("ping", {"type": "ping"})
                pinged = True

        def delta(payload: dict[str, Any]) -> None:
            event = {"type": "content_block_delta", "index": index, "delta": payload}
            send("content_block_delta", event)

        def close() -> None:
            nonlocal open_kind, thinking
            if open_kind is None:
                return
            if open_kind == "thinking":
                delta({"type": "signature_delta", "signature": _signature(thinking)})
                thinking = ""
            send("content_block_stop", {"type": "content_block_stop", "index": index})
            open_kind = None

        for step in reply.steps:
            if exchange.perform(step):
                continue
            if isinstance(step, Text):
                if open_kind != "text":
                    start({"type": "text", "text": ""})
                delta({"type": "text_delta", "text": step.text})
            elif isinstance(step, Thinking):
                if open_kind != "thinking":
                    start({"type": "thinking", "thinking": "", "signature": ""})
                thinking += step.text
                delta({"type": "thinking_delta", "thinking": step.text})
            elif isinstance(step, ToolCall):
                tool_id = step.id or random_id("toolu_01", 22)
                start({"type": "tool_use", "id": tool_id, "name": step.name, "input": {}})
                delta({"type": "input_json_delta", "partial_json": ""})
                for piece in pieces(step.arguments_json()):
                    delta({"type": "input_json_delta", "partial_json": piece})
                close()
            elif isinstance(step, MidStreamError):
                error = {"type": step.error_type, "message": step.message}
                send("error", {"type": "error", "error": error})
                exchange.end_stream()
                return
        close()
        if not pinged:
            send("ping", {"type": "ping"})
        send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason_in("anthropic"), "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
        )
        send("message_stop", {"type": "message_stop"})
        exchange.end_stream()

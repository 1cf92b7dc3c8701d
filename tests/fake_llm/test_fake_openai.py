"""The OpenAI fake, driven by the real ``openai`` SDK."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import openai
import pytest

from iris_runtime.testing.fake_llm import (
    Disconnect,
    Fail,
    FakeOpenAI,
    MidStreamError,
    Reply,
    Stall,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from tests.fake_llm.conftest import KEY, USER


def _chat_stream(client: openai.OpenAI, **extra: Any) -> list[Any]:
    return list(
        client.chat.completions.create(model="gpt-test", messages=USER, stream=True, **extra)
    )


# --- OpenAI --------------------------------------------------------------------------------------


def test_openai_stream_content_tool_calls_and_usage(
    fake_openai: FakeOpenAI, gpt: openai.OpenAI
) -> None:
    fake_openai.enqueue(
        Reply(
            [
                Text("Hel"),
                Text("lo"),
                ToolCall("read_file", {"path": "a.txt"}, id="call_fixed"),
                ToolCall("ls", '{"path": '),  # malformed on purpose: sent verbatim
                Usage(100, 20, cache_read=30, cache_write=5),
            ]
        )
    )
    chunks = _chat_stream(gpt, stream_options={"include_usage": True})

    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    with_choices = [chunk for chunk in chunks if chunk.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert content == "Hello"

    calls: dict[int, dict[str, str]] = {}
    for chunk in with_choices:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            if delta.id:
                call["id"] = delta.id
            if delta.function and delta.function.name:
                call["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
    assert calls[0] == {"id": "call_fixed", "name": "read_file", "arguments": '{"path": "a.txt"}'}
    assert calls[1]["name"] == "ls" and calls[1]["id"].startswith("call_")
    assert calls[1]["arguments"] == '{"path": '
    argument_chunks = [
        d
        for c in with_choices
        for d in c.choices[0].delta.tool_calls or []
        if d.index == 0 and d.function and d.function.arguments
    ]
    assert len(argument_chunks) > 1  # the arguments arrive in pieces

    assert with_choices[-1].choices[0].finish_reason == "tool_calls"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert all(chunk.usage is None for chunk in chunks[:-1])
    usage = usage_chunk.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (135, 20, 155)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 30


def test_openai_stream_helper_assembles_tool_calls(
    fake_openai: FakeOpenAI, gpt: openai.OpenAI
) -> None:
    fake_openai.enqueue(Reply([Text("Looking."), ToolCall("ls", {"path": "."})]))
    with gpt.chat.completions.stream(model="gpt-test", messages=USER) as stream:
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Looking."
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.function.name == "ls" and json.loads(call.function.arguments) == {"path": "."}


def test_openai_no_usage_chunk_unless_asked(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    fake_openai.enqueue(Reply([Text("hi")]))
    chunks = _chat_stream(gpt)
    assert all(chunk.choices for chunk in chunks)
    assert all(chunk.usage is None for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_openai_thinking_is_reasoning_content(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    fake_openai.enqueue(Reply([Thinking("hmm"), Text("ok")]))
    chunks = _chat_stream(gpt)
    reasoning = [getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks]
    assert "hmm" in reasoning

    fake_openai.reasoning_field = None  # as api.openai.com: never streamed
    fake_openai.enqueue(Reply([Thinking("hmm"), Text("ok")]))
    chunks = _chat_stream(gpt)
    assert all(getattr(c.choices[0].delta, "reasoning_content", None) is None for c in chunks)


def test_openai_non_streaming_completion(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    fake_openai.enqueue(
        Reply([Text("Sure."), ToolCall("ls", {"path": "/"}), Usage(7, 3, cache_read=2)])
    )
    completion = gpt.chat.completions.create(model="gpt-test", messages=USER)
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.message.content == "Sure."
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].function.arguments == '{"path": "/"}'
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (9, 3)

    fake_openai.enqueue(Reply([Text("cut")], stop_reason="max_tokens"))
    truncated = gpt.chat.completions.create(model="gpt-test", messages=USER)
    assert truncated.choices[0].finish_reason == "length"  # Anthropic's name, translated


def test_openai_429_with_retry_after(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    fake_openai.enqueue(
        Fail(429, "requests", "Rate limit reached", retry_after=3, code="rate_limit_exceeded")
    )
    with pytest.raises(openai.RateLimitError) as caught:
        _chat_stream(gpt, stream_options={"include_usage": True})
    err = caught.value
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == "3"
    assert (err.code, err.type) == ("rate_limit_exceeded", "requests")
    assert err.body == {
        "message": "Rate limit reached",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_openai_sdk_retry_honours_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Fail(429, "requests", "slow down", retry_after=1.2), Reply([Text("back")]))
    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.base_url, max_retries=2)
    started = time.monotonic()
    chunks = _chat_stream(client)
    elapsed = time.monotonic() - started
    client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "back"
    assert len(fake_openai.requests) == 2
    assert 1.2 <= elapsed < 5


def test_openai_wrong_or_missing_key_is_401(fake_openai: FakeOpenAI) -> None:
    client = openai.OpenAI(api_key="sk-wrong-key-123", base_url=fake_openai.base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        _chat_stream(client)
    client.close()
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    assert "sk-wrong-key-123" not in caught.value.message  # the key is masked, as OpenAI does

    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as missing:
        client.chat.completions.create(
            model="gpt-test", messages=USER, extra_headers={"Authorization": openai.omit}
        )
    client.close()
    assert missing.value.code is None
    assert "You didn't provide an API key" in missing.value.message
    assert fake_openai.requests[-1]["headers"].get("authorization") is None


LOCAL_REJECTIONS: list[tuple[dict[str, Any], str]] = [
    ({"messages": [{"role": "developer", "content": "be brief"}, *USER]}, "messages.0.role"),
    ({"max_completion_tokens": 64}, "max_completion_tokens"),
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    (
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "ls", "parameters": {"type": "object"}, "strict": True},
                }
            ]
        },
        "tools.0.function.strict",
    ),
]


@pytest.mark.parametrize(("extra", "param"), LOCAL_REJECTIONS)
def test_openai_strict_local_rejects(extra: dict[str, Any], param: str) -> None:
    with FakeOpenAI(api_key=KEY, strict_local=True) as fake:
        client = openai.OpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0)
        request: dict[str, Any] = {"model": "local", "messages": USER, "stream": True, **extra}
        with pytest.raises(openai.BadRequestError) as caught:
            list(client.chat.completions.create(**request))
        assert caught.value.status_code == 400
        assert caught.value.param == param
        client.close()

    with FakeOpenAI(api_key=KEY) as lenient:  # the real API takes all of these
        client = openai.OpenAI(api_key=KEY, base_url=lenient.base_url, max_retries=0)
        assert list(client.chat.completions.create(**request))
        client.close()


def test_openai_strict_local_accepts_a_compatible_request() -> None:
    with FakeOpenAI(api_key=KEY, strict_local=True) as fake:
        client = openai.OpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="local",
                messages=[{"role": "system", "content": "be brief"}, *USER],
                max_tokens=64,
                tools=[{"type": "function", "function": {"name": "ls", "parameters": {}}}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        client.close()
        assert chunks[-1].usage is not None


def test_openai_disconnect_and_mid_stream_error_drop_the_connection(
    fake_openai: FakeOpenAI, gpt: openai.OpenAI
) -> None:
    for fault in (Disconnect(), MidStreamError("server_error", "boom")):
        fake_openai.enqueue(Reply([Text("partial"), fault]))
        started = time.monotonic()
        with pytest.raises(openai.APIConnectionError) as caught:
            _chat_stream(gpt)
        assert time.monotonic() - started < 5
        assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)


def test_openai_stall_hits_the_client_timeout(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    impatient = gpt.with_options(timeout=0.5)
    fake_openai.enqueue(Reply([Text("partial"), Stall(30)]))
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _chat_stream(impatient)
    assert time.monotonic() - started < 5


def test_openai_requests_are_recorded(fake_openai: FakeOpenAI, gpt: openai.OpenAI) -> None:
    _chat_stream(gpt, stream_options={"include_usage": True})
    (request,) = fake_openai.requests
    assert (request["method"], request["path"]) == ("POST", "/v1/chat/completions")
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["body"]["stream_options"] == {"include_usage": True}

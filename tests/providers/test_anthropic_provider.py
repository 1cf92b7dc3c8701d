"""The anthropic provider through the real SDK against the wire-level fake."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from iris_runtime.engine.provider import (
    Done,
    Message,
    Notice,
    ProviderError,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    Usage,
)
from iris_runtime.providers import anthropic
from iris_runtime.providers.retry import RetryPolicy
from iris_runtime.testing import fake_llm
from iris_runtime.testing.fake_llm import (
    Disconnect,
    Fail,
    FakeAnthropic,
    MidStreamError,
    Reply,
    Stall,
    Text,
    Thinking,
)
from iris_runtime.testing.fake_llm import (
    Usage as ScriptUsage,
)
from tests.providers.common import (
    HELLO,
    LS,
    LS_SCHEMA,
    NoSleep,
    calls_of,
    claude,
    collect,
    only_error,
    registry_with_ls,
    settings,
    text_of,
    tool_context,
)

# --- anthropic: content --------------------------------------------------------------------------


def test_anthropic_plain_text(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Reply([Text("Hel"), Text("lo")]))
    events = collect(claude(tmp_path, fake_anthropic))
    assert events[:2] == [TextDelta("Hel"), TextDelta("lo")]
    assert isinstance(events[-1], Done) and events[-1].stop_reason == "end_turn"


def test_anthropic_tool_call_and_thinking(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(
        Reply(
            [
                Thinking("let me"),
                Thinking(" look"),
                Text("Looking."),
                fake_llm.ToolCall("ls", {"path": "."}, id="toolu_1"),
            ]
        )
    )
    events = collect(claude(tmp_path, fake_anthropic))
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["let me", " look"]
    assert text_of(events) == "Looking."
    assert calls_of(events) == [ToolCall("toolu_1", "ls", {"path": "."})]
    assert isinstance(events[-1], Done) and events[-1].stop_reason == "tool_use"


def test_anthropic_request_shape(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    calls = (ToolCall("t1", "ls", {"path": "a"}), ToolCall("t2", "ls", {"path": "b"}))
    request = ProviderRequest(
        "You are Iris.",
        (
            Message("user", "list a and b"),
            Message("assistant", "Sure.", calls),
            Message("tool", "x.txt", tool_call_id="t1"),
            Message("tool", "no such folder", tool_call_id="t2", is_error=True),
        ),
        (LS,),
    )
    collect(claude(tmp_path, fake_anthropic), request)
    body = fake_anthropic.requests[-1]["body"]
    assert body["model"] == "claude-sonnet-5-5" and body["max_tokens"] == 128000
    assert body["stream"] is True and "thinking" not in body
    assert body["system"] == [
        {"type": "text", "text": "You are Iris.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"] == [
        {"name": "ls", "description": "List a folder.", "input_schema": LS_SCHEMA}
    ]
    user, assistant, results = body["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "list a and b"}]}
    assert assistant["content"] == [
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "a"}},
        {"type": "tool_use", "id": "t2", "name": "ls", "input": {"path": "b"}},
    ]
    assert results["role"] == "user"
    first, second = results["content"]  # consecutive tool results: one user message
    assert first == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "x.txt",
        "is_error": False,
    }
    assert second["tool_use_id"] == "t2" and second["is_error"] is True
    assert second["cache_control"] == {"type": "ephemeral"}  # the conversation is cached too


def test_anthropic_usage_and_cost(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(
        Reply([Text("ok"), ScriptUsage(1000, 500, cache_read=200, cache_write=100)])
    )
    done = collect(claude(tmp_path, fake_anthropic))[-1]
    assert isinstance(done, Done)
    # claude-sonnet-5-5: $2 in, $10 out, $0.20 cache read, $2.50 cache write per million tokens.
    expected = (1000 * 2 + 500 * 10 + 200 * 0.2 + 100 * 2.5) / 1_000_000
    assert done.usage == Usage(1000, 500, 200, 100, pytest.approx(expected))


def test_anthropic_thinking_survives_the_tool_loop(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    provider = claude(tmp_path, fake_anthropic, IRIS_THINKING_BUDGET="2048")
    fake_anthropic.enqueue(
        Reply([Thinking("hmm"), fake_llm.ToolCall("ls", {"path": "."}, id="toolu_9")])
    )
    (call,) = calls_of(collect(provider))
    assert fake_anthropic.requests[0]["body"]["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2048,
    }
    follow_up = ProviderRequest(
        "sys",
        (
            Message("user", "hi"),
            Message("assistant", "", (call,)),
            Message("tool", "a", tool_call_id="toolu_9"),
        ),
    )
    collect(provider, follow_up)
    body = fake_anthropic.requests[1]["body"]
    assert body["thinking"]["type"] == "enabled"
    thinking, tool_use = body["messages"][1]["content"]
    assert (
        thinking["type"] == "thinking" and thinking["thinking"] == "hmm" and thinking["signature"]
    )
    assert tool_use["id"] == "toolu_9"
    # A provider that never saw the turn (a restart) sends the follow-up without thinking.
    collect(claude(tmp_path, fake_anthropic, IRIS_THINKING_BUDGET="2048"), follow_up)
    assert "thinking" not in fake_anthropic.requests[2]["body"]


def test_anthropic_malformed_tool_json_becomes_a_tool_error(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(Reply([fake_llm.ToolCall("ls", '{"path": "a"', id="toolu_bad")]))
    events = collect(claude(tmp_path, fake_anthropic))
    (call,) = calls_of(events)
    assert call.arguments == {"_raw_arguments": '{"path": "a"'}
    assert isinstance(events[-1], Done)
    result = registry_with_ls().execute(call, tool_context(tmp_path))
    assert result.is_error and "path" in result.text


# --- anthropic: failures -------------------------------------------------------------------------


def test_anthropic_429_with_retry_after_then_success(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Fail(429, "rate_limit_error", "Slow down", retry_after=0.2), Reply([Text("ok")])
    )
    started = time.monotonic()
    events = collect(claude(tmp_path, fake_anthropic))
    assert time.monotonic() - started >= 0.2  # the server's wait was honoured
    assert events[0] == Notice("retrying in 0.2s: rate limited (429)")
    assert text_of(events) == "ok" and isinstance(events[-1], Done)
    assert len(fake_anthropic.requests) == 2


def test_anthropic_overloaded_exhaustion(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    overloaded = Fail(529, "overloaded_error", "Overloaded")
    fake_anthropic.enqueue(overloaded, overloaded, overloaded, Reply([Text("too late")]))
    provider = claude(tmp_path, fake_anthropic)
    sleeps = NoSleep()
    provider.retry_policy = RetryPolicy(2, sleep=sleeps)
    events = collect(provider)
    assert len(fake_anthropic.requests) == 3 and len(sleeps.waits) == 2
    assert [type(e) for e in events] == [Notice, Notice, ProviderError]
    assert only_error(events).message == (
        "anthropic: giving up after 3 attempts: overloaded (529): Overloaded"
    )


def test_anthropic_401_names_the_key(tmp_path: Path) -> None:
    with FakeAnthropic(api_key="the-right-key") as fake:
        error = only_error(collect(claude(tmp_path, fake)))
        assert len(fake.requests) == 1
    assert "authentication failed (401)" in error.message and "ANTHROPIC_API_KEY" in error.message


def test_anthropic_missing_key_sends_nothing(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    provider = anthropic.create(settings(tmp_path, ANTHROPIC_BASE_URL=fake_anthropic.base_url))
    assert collect(provider) == [ProviderError("anthropic: ANTHROPIC_API_KEY is not set")]
    assert fake_anthropic.requests == []


def test_anthropic_mid_stream_error_after_output(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("par"), MidStreamError("overloaded_error", "Overloaded")]))
    events = collect(claude(tmp_path, fake_anthropic))
    assert events[0] == TextDelta("par")
    assert "after partial output: overloaded (in stream): Overloaded" in only_error(events).message
    assert len(fake_anthropic.requests) == 1  # not retried: the text was already delivered


def test_anthropic_mid_stream_error_before_output_is_retried(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([MidStreamError("overloaded_error", "Overloaded")]), Reply([Text("ok")])
    )
    provider = claude(tmp_path, fake_anthropic)
    provider.retry_policy = RetryPolicy(2, sleep=NoSleep())
    events = collect(provider)
    assert isinstance(events[0], Notice) and text_of(events) == "ok"


def test_anthropic_disconnect(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Reply([Text("half"), Disconnect()]))
    started = time.monotonic()
    events = collect(claude(tmp_path, fake_anthropic))
    assert time.monotonic() - started < 5
    assert events[0] == TextDelta("half")
    assert "connection error" in only_error(events).message


def test_anthropic_disconnect_before_output_is_retried(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(Reply([Disconnect()]), Reply([Text("ok")]))
    provider = claude(tmp_path, fake_anthropic)
    provider.retry_policy = RetryPolicy(2, sleep=NoSleep())
    events = collect(provider)
    assert isinstance(events[0], Notice) and "connection error" in events[0].text
    assert text_of(events) == "ok" and len(fake_anthropic.requests) == 2


def test_anthropic_stall_times_out(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Reply([Text("a"), Stall(30), Text("b")]))
    provider = claude(tmp_path, fake_anthropic, IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS="1")
    started = time.monotonic()
    events = collect(provider)
    assert time.monotonic() - started < 5
    assert events[0] == TextDelta("a")
    assert "no data for 1s" in only_error(events).message


def test_anthropic_abort_mid_stream_stops_promptly(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("a"), Stall(30), Text("b")]))
    abort = threading.Event()
    events = claude(tmp_path, fake_anthropic).stream(HELLO, abort)
    assert next(events) == TextDelta("a")
    abort.set()
    started = time.monotonic()
    assert list(events) == []
    assert time.monotonic() - started < 1

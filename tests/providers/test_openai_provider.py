"""The openai provider (official and local dialects) through the real SDK against the fake."""

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
from iris_runtime.providers import openai_compat
from iris_runtime.testing import fake_llm
from iris_runtime.testing.fake_llm import (
    Fail,
    FakeOpenAI,
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
    calls_of,
    collect,
    gpt,
    only_error,
    registry_with_ls,
    settings,
    text_of,
    tool_context,
)

# --- openai --------------------------------------------------------------------------------------


def test_openai_text_tool_call_and_cost(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(
        Reply(
            [
                Thinking("hmm"),
                Text("Look"),
                Text("ing."),
                fake_llm.ToolCall("ls", {"path": "."}, id="call_1"),
                ScriptUsage(1000, 500, cache_read=200),
            ]
        )
    )
    events = collect(gpt(tmp_path, fake_openai))
    assert [e for e in events if isinstance(e, ThinkingDelta)] == [ThinkingDelta("hmm")]
    assert text_of(events) == "Looking."
    assert calls_of(events) == [ToolCall("call_1", "ls", {"path": "."})]
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason == "tool_use"
    # gpt-4.1: $2 in, $8 out, $0.50 cached per million; prompt_tokens included the cached 200.
    expected = (1000 * 2 + 500 * 8 + 200 * 0.5) / 1_000_000
    assert done.usage == Usage(1000, 500, 200, 0, pytest.approx(expected))


def test_openai_request_shape_for_a_local_server(tmp_path: Path) -> None:
    with FakeOpenAI(strict_local=True) as fake:
        provider = gpt(tmp_path, fake, IRIS_REASONING_EFFORT="high")
        request = ProviderRequest(
            "You are Iris.",
            (
                Message("user", "ls"),
                Message("assistant", "", (ToolCall("c1", "ls", {"path": "."}),)),
                Message("tool", "denied", tool_call_id="c1", is_error=True),
            ),
            (LS,),
        )
        events = collect(provider, request)
        body = fake.requests[-1]["body"]
    assert text_of(events) == "ok", events  # the picky server accepted the request
    assert body["messages"][0] == {"role": "system", "content": "You are Iris."}
    assert body["messages"][2]["tool_calls"][0]["function"] == {
        "name": "ls",
        "arguments": '{"path": "."}',
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "Error: denied"}
    assert body["max_tokens"] == 32768 and "max_completion_tokens" not in body
    assert "strict" not in body["tools"][0]["function"] and "reasoning_effort" not in body
    assert body["stream_options"] == {"include_usage": True}


def test_openai_official_dialect(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    config = settings(
        tmp_path, OPENAI_API_KEY="test-key", IRIS_MODEL="o4-mini", IRIS_REASONING_EFFORT="low"
    )
    official = openai_compat.create(config)
    assert official.base_url == "https://api.openai.com/v1"
    compat = openai_compat.detect_compat(official.base_url, official.model)
    assert compat == openai_compat.Compat(True, "max_completion_tokens", False, True, True)
    # The same provider, pointed at the fake with the dialect api.openai.com gets.
    provider = openai_compat.OpenAIProvider(
        config,
        official.model,
        official.key,
        base_url=fake_openai.base_url,
        compat=compat,
        reasoning_effort="low",
    )
    assert text_of(collect(provider)) == "ok"
    body = fake_openai.requests[-1]["body"]
    assert body["messages"][0] == {"role": "developer", "content": "You are Iris."}
    assert body["max_completion_tokens"] == 100000 and "max_tokens" not in body
    assert body["reasoning_effort"] == "low"


def test_models_table_compat_overrides_the_url(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    (tmp_path / "models.yaml").write_text(
        "models:\n  my-local:\n    provider: openai\n    context_window: 8000\n"
        "    max_output_tokens: 1000\n    compat: {developer_role: true, stream_usage: false}\n"
    )
    provider = gpt(tmp_path, fake_openai, IRIS_MODEL="my-local")
    events = collect(provider)
    body = fake_openai.requests[-1]["body"]
    assert body["messages"][0]["role"] == "developer" and "stream_options" not in body
    assert body["max_tokens"] == 1000
    assert isinstance(events[-1], Done) and events[-1].usage == Usage()  # no usage sent: zeros


def test_openai_local_server_needs_no_key(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    provider = openai_compat.create(settings(tmp_path, OPENAI_BASE_URL=fake_openai.base_url))
    error = only_error(collect(provider))  # the fake insists on its key; a real local one would not
    assert "authentication failed (401)" in error.message and "OPENAI_API_KEY" in error.message
    assert fake_openai.requests[0]["headers"]["authorization"] == "Bearer not-needed"


def test_openai_missing_key_sends_nothing(tmp_path: Path) -> None:
    provider = openai_compat.create(settings(tmp_path))
    assert collect(provider) == [ProviderError("openai: OPENAI_API_KEY is not set")]


def test_openai_retry_then_success(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(
        Fail(429, "requests", "Rate limit reached", retry_after=0.1), Reply([Text("ok")])
    )
    events = collect(gpt(tmp_path, fake_openai))
    assert events[0] == Notice("retrying in 0.1s: rate limited (429)")
    assert text_of(events) == "ok" and len(fake_openai.requests) == 2


def test_openai_bad_request_is_final(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Fail(400, "invalid_request_error", "Unsupported parameter: 'tools'"))
    error = only_error(collect(gpt(tmp_path, fake_openai)))
    assert error.message == "openai: request rejected (400): Unsupported parameter: 'tools'"
    assert len(fake_openai.requests) == 1


def test_openai_drop_after_output(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Reply([Text("half"), MidStreamError("server_error", "boom")]))
    events = collect(gpt(tmp_path, fake_openai))
    assert events[0] == TextDelta("half")
    assert "after partial output" in only_error(events).message


def test_openai_stall_and_abort(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Reply([Text("a"), Stall(30)]), Reply([Text("a"), Stall(30)]))
    provider = gpt(tmp_path, fake_openai, IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS="1")
    started = time.monotonic()
    assert "no data for 1s" in only_error(collect(provider)).message
    assert time.monotonic() - started < 5
    abort = threading.Event()
    events = provider.stream(HELLO, abort)
    assert next(events) == TextDelta("a")
    abort.set()
    started = time.monotonic()
    assert list(events) == [] and time.monotonic() - started < 1


def test_openai_malformed_tool_json_becomes_a_tool_error(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.enqueue(Reply([fake_llm.ToolCall("ls", '{"path": ', id="call_bad")]))
    (call,) = calls_of(collect(gpt(tmp_path, fake_openai)))
    assert call == ToolCall("call_bad", "ls", {"_raw_arguments": '{"path": '})
    assert registry_with_ls().execute(call, tool_context(tmp_path)).is_error

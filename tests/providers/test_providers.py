"""The ``anthropic`` and ``openai`` providers, driven directly against the wire-level fakes through
the real SDKs: streaming, tool calls, request shapes, usage and cost, retries, auth, faults and
abort."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.config import Settings
from iris_runtime.engine.agent import AgentLoop
from iris_runtime.engine.provider import (
    Done,
    Message,
    Notice,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from iris_runtime.engine.tools import ToolContext, ToolRegistry, ToolResult
from iris_runtime.errors import ConfigError
from iris_runtime.plugins import PluginHost
from iris_runtime.providers import anthropic, openai_compat
from iris_runtime.providers import plugin as provider_plugin
from iris_runtime.providers.retry import RetryPolicy
from iris_runtime.testing import fake_llm
from iris_runtime.testing.fake_llm import (
    Disconnect,
    Fail,
    FakeAnthropic,
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

LS_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
LS = ToolSpec("ls", "List a folder.", LS_SCHEMA)
HELLO = ProviderRequest("You are Iris.", (Message("user", "hi"),), (LS,))


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {"IRIS_DATA_DIR": str(tmp_path), "IRIS_PROVIDER_MAX_RETRIES": "2", **env}
    )


def claude(tmp_path: Path, fake: FakeAnthropic, **env: str) -> anthropic.AnthropicProvider:
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url, **env}
    return anthropic.create(settings(tmp_path, **env))


def gpt(tmp_path: Path, fake: FakeOpenAI, **env: str) -> openai_compat.OpenAIProvider:
    env = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": fake.base_url, **env}
    return openai_compat.create(settings(tmp_path, **env))


def collect(provider: Any, request: ProviderRequest = HELLO) -> list[ProviderEvent]:
    return list(provider.stream(request, threading.Event()))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ProviderEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


def only_error(events: list[ProviderEvent]) -> ProviderError:
    errors = [e for e in events if isinstance(e, ProviderError)]
    assert len(errors) == 1 and events[-1] is errors[0], events
    return errors[0]


class NoSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float, abort: threading.Event) -> bool:
        self.waits.append(seconds)
        return False


# --- registration and start-up -------------------------------------------------------------------


def test_both_providers_are_registered(tmp_path: Path) -> None:
    config = settings(tmp_path, IRIS_LOAD_PLUGINS="")
    providers = PluginHost(config).providers()
    assert {"offline", "anthropic", "openai"} <= set(providers)
    assert isinstance(providers["anthropic"](config), anthropic.AnthropicProvider)
    assert isinstance(providers["openai"](config), openai_compat.OpenAIProvider)


def test_a_missing_sdk_is_a_clear_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sdk(name: str) -> None:
        raise ModuleNotFoundError("No module named 'openai'", name="openai")

    monkeypatch.setattr(provider_plugin.importlib, "import_module", no_sdk)
    with pytest.raises(ConfigError, match="needs the 'openai' package"):
        provider_plugin.on_demand("openai")(settings(tmp_path))


def test_unknown_model_is_a_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown model 'claude-nope'"):
        anthropic.create(settings(tmp_path, IRIS_MODEL="claude-nope"))


def test_a_missing_key_is_not_a_start_up_error(tmp_path: Path) -> None:
    assert anthropic.create(settings(tmp_path)).name == "anthropic"
    assert openai_compat.create(settings(tmp_path)).name == "openai"


def test_bad_thinking_budget_is_a_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="IRIS_THINKING_BUDGET"):
        anthropic.create(settings(tmp_path, IRIS_THINKING_BUDGET="100"))


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


# --- helpers for the tool-error checks -----------------------------------------------------------


class LsTool:
    name = "ls"
    description = "List a folder."
    parameters = LS_SCHEMA

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult("listed")


def registry_with_ls() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(LsTool())
    return registry


def tool_context(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, tmp_path, threading.Event(), lambda path, caption: None)


def test_providers_expose_the_models_context_window(tmp_path: Path) -> None:
    assert anthropic.create(settings(tmp_path)).context_window == 1_000_000
    assert openai_compat.create(settings(tmp_path)).context_window == 1_047_576


class Output:
    """A RunOutput that keeps what the loop reports."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def respond(self, text: str) -> None:
        self.lines.append(f"reply: {text}")

    def status(self, text: str) -> None:
        self.lines.append(f"status: {text}")

    def thinking(self, text: str) -> None:
        pass

    def tool_event(self, event: Any) -> None:
        pass


def test_the_agent_loop_recovers_from_malformed_tool_json(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([fake_llm.ToolCall("ls", "{not json", id="toolu_x")]),
        Reply([fake_llm.ToolCall("ls", {"path": "."}, id="toolu_y")]),
        Reply([Text("Done.")]),
    )
    loop = AgentLoop(claude(tmp_path, fake_anthropic), registry_with_ls(), max_turns=5)
    out = Output()
    outcome = loop.run(
        "sys", [Message("user", "list")], tool_context(tmp_path), out, threading.Event()
    )
    assert outcome.status == "done" and outcome.replies == ["Done."]
    first_result = fake_anthropic.requests[1]["body"]["messages"][-1]["content"][0]
    assert first_result["tool_use_id"] == "toolu_x" and first_result["is_error"] is True
    second_result = fake_anthropic.requests[2]["body"]["messages"][-1]["content"][0]
    assert second_result["content"] == "listed" and second_result["is_error"] is False

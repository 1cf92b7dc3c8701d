"""The Anthropic fake (and the shared scripting rules), driven by the real ``anthropic`` SDK."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anthropic
import httpx2
import pytest

from iris_runtime.testing.fake_llm import (
    Disconnect,
    Fail,
    FakeAnthropic,
    MidStreamError,
    Reply,
    Stall,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from tests.fake_llm.conftest import KEY, USER


def _create_stream(client: anthropic.Anthropic, **extra: Any) -> list[Any]:
    return list(
        client.messages.create(
            model="claude-test", max_tokens=64, messages=USER, stream=True, **extra
        )
    )


# --- scripting -----------------------------------------------------------------------------------


def test_a_fail_must_be_alone_in_its_reply() -> None:
    with pytest.raises(ValueError):
        Reply([Text("x"), Fail(500, "api_error", "boom")])
    with pytest.raises(TypeError):
        Reply(["not a step"])


def test_base_url_needs_a_started_server() -> None:
    fake = FakeAnthropic()
    with pytest.raises(RuntimeError):
        _ = fake.base_url
    fake.stop()  # stopping a server never started is a no-op


# --- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_stream_helper_accumulates_thinking_text_and_tool_use(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(
        Reply(
            [
                Thinking("Let me "),
                Thinking("think."),
                Text("Hel"),
                Text("lo"),
                ToolCall("read_file", {"path": "a.txt", "lines": [1, 2]}, id="toolu_fixed"),
                ToolCall("ls", {}),
                Usage(12, 34, cache_read=5, cache_write=6),
            ]
        )
    )
    with claude.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()

    assert texts == ["Hel", "lo"]
    assert [block.type for block in message.content] == [
        "thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    thinking, text, tool, empty_tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me think."
    assert thinking.signature
    assert text.type == "text" and text.text == "Hello"
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == (
        "toolu_fixed",
        "read_file",
        {"path": "a.txt", "lines": [1, 2]},
    )
    assert empty_tool.type == "tool_use" and empty_tool.input == {}
    assert empty_tool.id.startswith("toolu_")
    assert message.stop_reason == "tool_use"
    assert message.model == "claude-test"
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (12, 34)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (5, 6)


def test_anthropic_raw_stream_events(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("Hi"), ToolCall("ls", {"path": "/tmp", "all": True})]))
    events = _create_stream(claude)

    types = [event.type for event in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert events[0].message.usage.input_tokens > 0
    assert events[0].message.stop_reason is None
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["text", "tool_use"]
    assert types.count("content_block_stop") == 2
    partials = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len([p for p in partials if p]) > 1  # the JSON arrives in pieces
    assert json.loads("".join(partials)) == {"path": "/tmp", "all": True}
    assert events[-2].delta.stop_reason == "tool_use"
    assert events[-2].usage.output_tokens > 0


def test_anthropic_malformed_tool_json_is_sent_verbatim(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Reply([ToolCall("ls", '{"path": "/tmp",, }')]))
    events = _create_stream(claude)
    partials = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert "".join(partials) == '{"path": "/tmp",, }'


def test_anthropic_non_streaming_message_and_default_reply(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([Thinking("hm"), Text("Done."), Usage(3, 4)], stop_reason="length")
    )
    message = claude.messages.create(model="claude-test", max_tokens=64, messages=USER)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].type == "text" and message.content[1].text == "Done."
    assert message.stop_reason == "max_tokens"  # OpenAI's name, translated
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 4)
    assert message.id.startswith("msg_")

    default = claude.messages.create(model="claude-test", max_tokens=64, messages=USER)
    assert default.content[0].type == "text" and default.content[0].text == "ok"
    assert default.stop_reason == "end_turn"


def test_anthropic_requests_are_recorded(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    claude.messages.create(model="claude-test", max_tokens=64, messages=USER, system="be brief")
    (request,) = fake_anthropic.requests
    assert (request["method"], request["path"]) == ("POST", "/v1/messages")
    assert request["headers"]["anthropic-version"]
    assert request["headers"]["authorization"] == f"Bearer {KEY}"  # how the 2.x SDK sends api_key
    assert request["body"]["system"] == "be brief"
    assert request["body"]["messages"] == USER


def test_anthropic_529_with_retry_after_surfaces_as_overloaded_error(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Fail(529, "overloaded_error", "Overloaded", retry_after=2))
    with pytest.raises(anthropic.OverloadedError) as caught:
        _create_stream(claude)
    err = caught.value
    assert isinstance(err, anthropic.APIStatusError) and err.status_code == 529
    assert err.response.headers["retry-after"] == "2"
    assert err.type == "overloaded_error" and err.api_message == "Overloaded"
    assert err.request_id and err.request_id.startswith("req_")
    assert isinstance(err.body, dict) and err.body["type"] == "error"


def test_anthropic_sdk_retry_honours_retry_after(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(
        Fail(529, "overloaded_error", "Overloaded", retry_after=1.2), Reply([Text("back")])
    )
    client = anthropic.Anthropic(api_key=KEY, base_url=fake_anthropic.base_url, max_retries=2)
    started = time.monotonic()
    message = client.messages.create(model="claude-test", max_tokens=64, messages=USER)
    elapsed = time.monotonic() - started
    client.close()

    assert message.content[0].type == "text" and message.content[0].text == "back"
    assert len(fake_anthropic.requests) == 2
    # The SDK's own backoff before a first retry is at most 0.5 s: waiting 1.2 s is retry-after.
    assert 1.2 <= elapsed < 5
    retry_counts = [r["headers"]["x-stainless-retry-count"] for r in fake_anthropic.requests]
    assert retry_counts == ["0", "1"]


def test_anthropic_x_should_retry_false_is_obeyed(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Fail(529, "overloaded_error", "Overloaded", should_retry=False))
    client = anthropic.Anthropic(api_key=KEY, base_url=fake_anthropic.base_url, max_retries=3)
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model="claude-test", max_tokens=64, messages=USER)
    client.close()
    assert len(fake_anthropic.requests) == 1


def test_anthropic_wrong_key_is_401_and_consumes_no_reply(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Reply([Text("for the right key")]))
    client = anthropic.Anthropic(api_key="wrong", base_url=fake_anthropic.base_url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="claude-test", max_tokens=64, messages=USER)
    client.close()
    assert caught.value.status_code == 401
    assert caught.value.type == "authentication_error"
    assert fake_anthropic.pending == 1


def test_anthropic_x_api_key_header_is_checked(fake_anthropic: FakeAnthropic) -> None:
    def client(headers: dict[str, Any]) -> anthropic.Anthropic:
        # The 2.x SDK sends api_key as a Bearer token; omitting that header makes it send only
        # the x-api-key given here, as older SDKs and curl do.
        return anthropic.Anthropic(
            api_key=KEY,
            base_url=fake_anthropic.base_url,
            max_retries=0,
            default_headers={"Authorization": anthropic.omit, **headers},
        )

    good = client({"x-api-key": KEY})
    message = good.messages.create(model="claude-test", max_tokens=64, messages=USER)
    assert message.content[0].type == "text"
    assert fake_anthropic.requests[-1]["headers"]["x-api-key"] == KEY
    assert "authorization" not in fake_anthropic.requests[-1]["headers"]
    good.close()

    for headers, reason in (
        ({"x-api-key": "nope"}, "invalid x-api-key"),
        ({}, "x-api-key header is required"),
    ):
        bad = client(headers)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            bad.messages.create(model="claude-test", max_tokens=64, messages=USER)
        bad.close()
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": reason},
            "request_id": caught.value.request_id,
        }


def test_anthropic_mid_stream_error_event_raises(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([Text("partial"), MidStreamError("overloaded_error", "Overloaded")])
    )
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        for event in claude.messages.create(
            model="claude-test", max_tokens=64, messages=USER, stream=True
        ):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                seen.append(event.delta.text)
    assert seen == ["partial"]
    # The HTTP status was 200: the SDK builds the error from the event body.
    assert caught.value.status_code == 200
    assert caught.value.type == "overloaded_error"

    fake_anthropic.enqueue(Reply([Text("x"), MidStreamError("api_error", "Internal")]))
    with (
        pytest.raises(anthropic.APIStatusError),
        claude.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream,
    ):
        stream.get_final_message()


def test_anthropic_mid_stream_error_on_a_non_streaming_request_is_an_http_error(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("x"), MidStreamError("overloaded_error", "Overloaded")]))
    with pytest.raises(anthropic.OverloadedError):
        claude.messages.create(model="claude-test", max_tokens=64, messages=USER)


def test_anthropic_disconnect_raises_instead_of_hanging(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("partial"), Disconnect()]))
    started = time.monotonic()
    # Mid-stream, the Anthropic SDK lets the transport error through unwrapped.
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)):
        _create_stream(claude)
    assert time.monotonic() - started < 5

    fake_anthropic.enqueue(Reply([Disconnect()]))
    with pytest.raises(anthropic.APIConnectionError):  # before any response: wrapped
        claude.messages.create(model="claude-test", max_tokens=64, messages=USER)


def test_anthropic_stall_hits_the_client_timeout(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    impatient = claude.with_options(timeout=0.5)
    fake_anthropic.enqueue(Reply([Text("partial"), Stall(30), Text("never")]))
    started = time.monotonic()
    with pytest.raises((httpx2.ReadTimeout, anthropic.APITimeoutError)):
        _create_stream(impatient)
    assert time.monotonic() - started < 5

    fake_anthropic.enqueue(Reply([Stall(30), Text("never")]))
    with pytest.raises(anthropic.APITimeoutError):
        impatient.messages.create(model="claude-test", max_tokens=64, messages=USER)


def test_anthropic_short_stall_is_just_a_pause(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("a"), Stall(0.3), Text("b")]))
    started = time.monotonic()
    with claude.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        assert stream.get_final_text() == "ab"
    assert time.monotonic() - started >= 0.3


def test_stop_ends_a_stalled_stream_promptly() -> None:
    fake = FakeAnthropic(api_key=KEY).start()
    fake.enqueue(Reply([Text("partial"), Stall(60)]))
    client = anthropic.Anthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
    outcome: list[BaseException | None] = []

    def consume() -> None:
        try:
            _create_stream(client)
            outcome.append(None)
        except BaseException as err:
            outcome.append(err)

    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + 5
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    started = time.monotonic()
    fake.stop()
    assert time.monotonic() - started < 2
    reader.join(5)
    client.close()
    assert not reader.is_alive()
    assert outcome and outcome[0] is not None  # the client saw the connection go

"""``show_logged_message``: a message Iris has already logged (a sub-agent's announce) is delivered
to the chat, in the forum topic the run came from, through the sender (HTML chunks, retries), and
never logged again.

An in-process runtime (the real plugin host, engine and Telegram transport) polling the fake Bot
API: the engine's announce path calls this method on the transport it owns, and the test holds
that same transport."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram_harness import new_chat, telegram_env

from iris_runtime.config import Settings
from iris_runtime.engine.transport import LoggedMessagePoster
from iris_runtime.runtime import Runtime
from iris_runtime.testing.fake_telegram import (
    MESSAGE_LIMIT,
    FakeTelegram,
    server_error,
    utf16_len,
)

TOPIC = 77
# Longer than one Telegram message: delivered as several, all in the topic.
ANNOUNCE = "\n".join(
    [
        "**Status**: success",
        "**Result**: 3 sources agree <no conflicts> & nothing to fix",
        *[f"line {i:04d} {'lorem ipsum ' * 8}" for i in range(120)],
        "runtime 5m12s · tokens 10/20/30 · sessionKey agent:main:subagent:x",
    ]
)


@pytest.fixture
def runtime(fake_telegram: FakeTelegram, tmp_path: Path) -> Iterator[Runtime]:
    env = {"IRIS_DATA_DIR": str(tmp_path / "data"), **telegram_env(fake_telegram)}
    runtime = Runtime.build(Settings.from_env(env))
    runtime.start()
    fake_telegram.wait_for(lambda f: f.calls_of("getUpdates"), "the first getUpdates")
    yield runtime
    runtime.stop()


def _poster(runtime: Runtime, channel: str) -> LoggedMessagePoster:
    transport = runtime.engine.transports.owner(channel)
    assert transport.transport_id == "telegram"
    assert isinstance(transport, LoggedMessagePoster)
    return transport


def _entries(runtime: Runtime, channel: str) -> list[dict[str, Any]]:
    return runtime.engine.sessions.entries(channel)


def test_an_announce_lands_in_the_runs_topic_chunked_and_unlogged(
    fake_telegram: FakeTelegram, runtime: Runtime
) -> None:
    chat = -new_chat()
    fake_telegram.chat(chat, forum=True)
    channel = f"tg-{chat}"
    fake_telegram.user_says(chat, "research this in the background", thread_id=TOPIC)
    fake_telegram.wait_for(
        lambda f: any(e.get("role") == "assistant" for e in _entries(runtime, channel)),
        "the run's reply in the log",
    )
    logged = _entries(runtime, channel)
    before = {m.message_id for m in fake_telegram.bot_messages(chat)}
    fake_telegram.fail_next("sendMessage", server_error(502))  # the sender retries

    first = _poster(runtime, channel).show_logged_message(channel, ANNOUNCE, str(TOPIC))

    shown = [m for m in fake_telegram.bot_messages(chat) if m.message_id not in before]
    assert len(shown) >= 2  # chunked under the limit
    assert str(shown[0].message_id) == first
    assert all(m.thread_id == TOPIC for m in shown)
    assert all(utf16_len(m.text) <= MESSAGE_LIMIT for m in shown)
    assert shown[0].text.startswith("Status: success\nResult: 3 sources agree <no conflicts> &")
    assert shown[0].entities[0]["type"] == "bold"  # Markdown, as Telegram HTML
    assert shown[-1].text.endswith("sessionKey agent:main:subagent:x")
    sends = [c for c in fake_telegram.calls_of("sendMessage") if c.params["chat_id"] == chat]
    assert [c.status for c in sends[-len(shown) - 1 :]][:2] == [502, 200]
    assert all(c.params.get("message_thread_id") == TOPIC for c in sends[-len(shown) :])
    # The engine logged the announce; the transport adds nothing to the chat's log.
    assert _entries(runtime, channel) == logged


@pytest.mark.parametrize("thread", [None, "", "general", "-5"])
def test_without_a_topic_it_goes_to_the_chat(
    fake_telegram: FakeTelegram, runtime: Runtime, thread: str | None
) -> None:
    chat = new_chat()
    fake_telegram.chat(chat)
    channel = f"tg-{chat}"
    first = _poster(runtime, channel).show_logged_message(channel, "Status: error", thread)
    [shown] = fake_telegram.bot_messages(chat)
    assert (str(shown.message_id), shown.text, shown.thread_id) == (first, "Status: error", None)
    [call] = [c for c in fake_telegram.calls_of("sendMessage") if c.params["chat_id"] == chat]
    assert "message_thread_id" not in call.params and "reply_parameters" not in call.params
    assert _entries(runtime, channel) == []

"""Session sub-agents on Telegram, end to end (served Iris, fake Bot API, scripted provider):
a sub-agent spawned from a forum topic announces in that topic, and ``/subagents`` answers
there without a model turn."""

from __future__ import annotations

import pytest
from telegram_harness import TelegramIris, new_chat

pytestmark = pytest.mark.slow

RULES = [
    {
        "when": "survey the sea",
        "turns": [
            [{"tool": "sessions_spawn", "args": {"task": "sea survey child", "label": "sea"}}],
            [{"text": "Surveying."}],
        ],
    },
    {"when": "sea survey child", "turns": [[{"text": "the sea is wide"}]]},
    {"when": "Your task has ended", "turns": [[{"text": "Sea report ready"}]]},
]


@pytest.fixture
def iris(shared_telegram_iris: TelegramIris) -> TelegramIris:
    shared_telegram_iris.rules(RULES)
    return shared_telegram_iris


def test_the_announce_lands_in_the_spawning_topic(iris: TelegramIris) -> None:
    chat = -new_chat()
    iris.fake.user_says(chat, "survey the sea", thread_id=42)
    announce = iris.wait(
        lambda f: next((m for m in f.bot_messages(chat) if "Sea report ready" in m.text), None),
        "the announce",
    )
    assert announce.thread_id == 42
    assert announce.text.startswith('Sub-agent #1 "sea" (agent main) finished.')
    assert "Status: success" in announce.text
    calls_before = len(iris.provider_calls())
    iris.fake.user_says(chat, "/subagents list", thread_id=42)
    listing = iris.wait(
        lambda f: next(
            (m for m in f.bot_messages(chat) if m.text.startswith("Sub-agents of this chat")),
            None,
        ),
        "the /subagents list reply",
    )
    assert listing.thread_id == 42
    assert '#1 "sea" · main · success' in listing.text
    assert len(iris.provider_calls()) == calls_before
    assert sum("Sea report ready" in m.text for m in iris.fake.bot_messages(chat)) == 1

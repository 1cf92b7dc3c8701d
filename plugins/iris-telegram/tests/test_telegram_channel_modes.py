"""Channel modes on Telegram (channels.json) through a served Iris on the fake Bot API: a group
is the channel, a forum topic its thread. Every mode's triggers, the topic or message each reply
lands on, one conversation per topic, admin refusal, and passthrough to a real bridge sub-agent
with Iris's model never called."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from telegram_harness import ALLOWED_CHAT, ALLOWED_USER, TelegramIris, new_chat

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.engine.transport import ChannelShape
from iris_runtime.testing.subagent import SubAgent

pytestmark = pytest.mark.slow

BOT = "@iris_test_bot"


def test_every_mode_on_telegram(
    telegram_iris: Callable[..., TelegramIris],
    start_subagent: Callable[..., SubAgent],
    tmp_path: Path,
) -> None:
    helper = start_subagent(
        "helper",
        [
            {"when": "weather", "turns": [[{"text": "sunny"}]]},
            {"when": "again", "turns": [[{"recall": True}]]},
        ],
        TELEGRAM_BOT_TOKEN="",
    )
    threads, interactive, leads, direct, relay = (-new_chat() for _ in range(5))
    channels = {
        f"tg-{threads}": {"mode": "thread"},
        f"tg-{interactive}": {"mode": "interactive-thread"},
        f"tg-{leads}": {"mode": "leads"},
        f"tg-{direct}": {"mode": "dm"},
        f"tg-{relay}": {"mode": "passthrough", "agent": "helper"},
        f"tg-{ALLOWED_CHAT}": {"mode": "admin", "admins": [str(ALLOWED_USER)]},
    }
    data = tmp_path / "iris0" / "data"
    data.mkdir(parents=True)
    (data / "channels.json").write_text(json.dumps(channels))
    iris = telegram_iris(
        [
            {"when": "recall", "turns": [[{"recall": True}]]},
            {"when": "relay-me", "turns": [[{"error": "Iris's model must not see this"}]]},
        ]
    )
    AgentRegistry(data / "agents.json").register("helper", helper.bridge_url, token=helper.token)
    fake = iris.fake

    def says(chat: int, text: str, **kwargs: object) -> int:
        return int(fake.user_says(chat, text, **kwargs)["message"]["message_id"])  # type: ignore[arg-type]

    # thread: mention-gated; each topic its own conversation.
    ignored = says(threads, "hello all", thread_id=7)
    first = says(threads, f"{BOT} first question", thread_id=7)
    assert iris.wait_reply(threads, first, "echo: first question").thread_id == 7
    again = says(threads, f"{BOT} recall", thread_id=7)
    iris.wait_reply(threads, again, "recall: first question")
    other = says(threads, f"{BOT} recall", thread_id=8)
    fresh = iris.wait_reply(threads, other, prefix="recall:")
    assert "first question" not in fresh.text and fresh.thread_id == 8
    top = says(threads, f"{BOT} at top level")
    assert iris.wait_reply(threads, top, "echo: at top level").thread_id is None
    assert iris.replies(threads, ignored) == []

    # interactive-thread: after Iris answered in a topic, no mention is needed there.
    start = says(interactive, f"{BOT} open a ticket", thread_id=9)
    iris.wait_reply(interactive, start, "echo: open a ticket")
    follow = says(interactive, "recall", thread_id=9)
    iris.wait_reply(interactive, follow, "recall: open a ticket")
    quiet = says(interactive, "not for iris", thread_id=10)

    # leads: every top-level message, answered on that message.
    lead = says(leads, "we need 40 seats")
    assert iris.wait_reply(leads, lead, "echo: we need 40 seats").reply_to == lead

    # dm: every message of the group, one conversation.
    says(direct, "first")
    later = says(direct, "recall")
    iris.wait_reply(direct, later, "recall: first")

    # admin: others who address Iris get a refusal, their chatter nothing; admins a run.
    chatter = says(ALLOWED_CHAT, "lunch?", user_id=2002, username="bob")
    refused = says(ALLOWED_CHAT, f"{BOT} do it", user_id=2002, username="bob")
    iris.wait_reply(
        ALLOWED_CHAT, refused, "Sorry, only this channel's admins can ask me things here."
    )
    allowed = says(ALLOWED_CHAT, "status")
    iris.wait_reply(ALLOWED_CHAT, allowed, "echo: status")
    assert iris.replies(ALLOWED_CHAT, chatter) == []

    # passthrough: the sub-agent answers, one conversation for the chat; the model never runs.
    asked = says(relay, "relay-me the weather")
    iris.wait_reply(relay, asked, "sunny", timeout=60)
    more = says(relay, "relay-me again")
    iris.wait_reply(relay, more, "recall: relay-me the weather", timeout=60)

    prompts = [c["prompt"] for c in iris.provider_calls()]
    assert not [p for p in prompts if "relay-me" in p or p in {"hello all", "do it", "lunch?"}], (
        prompts
    )
    assert "not for iris" not in prompts and iris.replies(interactive, quiet) == []


def test_a_group_without_topics_is_one_conversation(
    telegram_iris: Callable[..., TelegramIris], tmp_path: Path
) -> None:
    """Outside forum topics a reply cannot open a thread: a top-level follow-up (or a reply to
    Iris's answer) continues the chat's conversation, ``/stop`` at top level stops its run, and
    an event addressed to a topic's conversation is answered in that topic."""
    leads, threads, forum = (-new_chat() for _ in range(3))
    data = tmp_path / "iris0" / "data"
    data.mkdir(parents=True)
    channels = {
        f"tg-{leads}": {"mode": "leads"},
        f"tg-{threads}": {"mode": "thread"},
        f"tg-{forum}": {"mode": "thread"},
    }
    (data / "channels.json").write_text(json.dumps(channels))
    iris = telegram_iris(
        [
            {"when": "recall", "turns": [[{"recall": True}]]},
            {"when": "long silence", "turns": [[{"sleep": 120}]]},
        ]
    )
    fake = iris.fake

    def says(chat: int, text: str, **kwargs: object) -> int:
        return int(fake.user_says(chat, text, **kwargs)["message"]["message_id"])  # type: ignore[arg-type]

    lead = says(leads, "we need 40 seats")
    iris.wait_reply(leads, lead, "echo: we need 40 seats")
    again = says(leads, "recall")  # top level again: the same conversation
    iris.wait_reply(leads, again, "recall: we need 40 seats")

    asked = says(threads, f"{BOT} first question")
    answer = iris.wait_reply(threads, asked, "echo: first question")
    bot = {"message_id": answer.message_id, "from": {"id": 1, "is_bot": True, "username": BOT[1:]}}
    follow = says(threads, "recall", extra={"reply_to_message": bot})
    iris.wait_reply(threads, follow, "recall: first question")

    slow = says(leads, "a long silence")
    iris.wait_reply(leads, slow, "Thinking…")
    stop = says(leads, "/stop")
    assert iris.wait_reply(leads, stop).text == "Stopping."
    iris.wait_reply(leads, slow, "(stopped)", timeout=60)
    assert not [p.name for p in data.iterdir() if "@" in p.name], "one folder per chat"

    says(forum, "making it a forum", thread_id=7)
    posted = iris.server.post(f"/channels/tg-{forum}@7/events", json_body={"text": "topic event"})
    assert posted.status == 202, posted.body
    iris.wait(
        lambda f: [m for m in f.bot_messages(forum) if "topic event" in m.text],
        "the event's answer",
    )
    [reply] = [m for m in fake.bot_messages(forum) if "topic event" in m.text]
    assert reply.thread_id == 7

    # A file shared in a topic is saved under that topic's conversation, where its run reads.
    sent = fake.user_sends_document(
        forum, b"notes", "notes.txt", caption=f"{BOT} file", thread_id=7
    )
    iris.wait_reply(forum, int(sent["message"]["message_id"]), prefix="echo:")
    saved = data / f"tg-{forum}@7" / "attachments"
    assert [p.name for p in saved.iterdir()] == [f"{sent['message']['message_id']}_notes.txt"]


def test_conversation_ids_name_topics_in_ascii_digits() -> None:
    from iris_telegram.inbound import topic_of
    from iris_telegram.plugin import register_channel_shapes

    shapes: list[ChannelShape] = []
    register_channel_shapes(shapes.append)
    [shape] = shapes
    assert shape.is_valid("tg--1001@7") and shape.is_valid("tg-42")
    assert not shape.is_valid("tg--1001@abc") and not shape.is_valid("tg--1001@²")
    assert topic_of("7") == 7 and topic_of("²") is None and topic_of("07") is None

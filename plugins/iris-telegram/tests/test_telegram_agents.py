"""``@agent`` in a Telegram chat: routed straight to a real sub-agent runtime over the bridge
(Iris's model never called), its status lines shown in the placeholder, its reply posted by this
transport in the same chat and topic, and one sub-agent conversation per chat."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from telegram_harness import TelegramIris, new_chat

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.subagent import SubAgent

pytestmark = pytest.mark.slow


def test_a_leading_mention_goes_straight_to_the_sub_agent(
    telegram_iris: Callable[..., TelegramIris], start_subagent: Callable[..., SubAgent]
) -> None:
    helper = start_subagent(
        "helper",
        [
            {
                "when": "disk",
                "turns": [[{"tool": "no_such_tool"}], [{"sleep": 3}, {"text": "disk is **fine**"}]],
            },
            {"when": "again", "turns": [[{"recall": True}]]},
        ],
        TELEGRAM_BOT_TOKEN="",  # a bridge-only agent needs no bot of its own
    )
    iris = telegram_iris()
    registry = AgentRegistry(iris.server.data_dir / "agents.json")
    registry.register("helper", helper.bridge_url, token=helper.token)
    fake, chat = iris.fake, -new_chat()

    asked = fake.user_says(chat, "@helper how is the disk?", thread_id=12)["message"]["message_id"]
    reply = iris.wait_reply(chat, asked, "disk is fine", timeout=60)
    assert reply.thread_id == 12 and reply.entities == [{"type": "bold", "offset": 8, "length": 4}]
    assert reply.history[0] == "Thinking…"
    assert "→ asking helper" in reply.history
    assert "→ running no_such_tool" in reply.history, "the sub-agent's own status line"
    assert iris.provider_calls() == [], "Iris's model was never asked"

    # The same chat continues the same sub-agent conversation (a stable conversation key).
    again = fake.user_says(chat, "@helper again", thread_id=12)["message"]["message_id"]
    iris.wait_reply(chat, again, "recall: how is the disk?", timeout=60)
    assert iris.provider_calls() == []

    # A name nobody registered is an ordinary message for Iris's own model.
    other = fake.user_says(chat, "@nobody hello", thread_id=12)["message"]["message_id"]
    iris.wait_reply(chat, other, "echo: @nobody hello")
    assert [c["prompt"] for c in iris.provider_calls()] == ["@nobody hello"]
    # The sub-agent has no Telegram connection of its own: it needs none to answer.
    assert "transports=bridge\n" in helper.server.log_tail(100_000)

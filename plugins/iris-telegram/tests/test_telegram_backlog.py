"""A chat's backlog after a restart: the ``@agent`` message waiting in ``getUpdates`` when Iris
starts goes to the sub-agent, because routers are in place before the transport polls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from telegram_harness import TelegramIris, new_chat

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.fake_telegram import FakeTelegram
from iris_runtime.testing.subagent import SubAgent

pytestmark = pytest.mark.slow


def test_an_agent_message_waiting_at_start_up_reaches_the_agent(
    telegram_iris: Callable[..., TelegramIris],
    start_subagent: Callable[..., SubAgent],
    fake_telegram: FakeTelegram,
    tmp_path: Path,
) -> None:
    helper = start_subagent(
        "helper", [{"when": "backlog", "turns": [[{"text": "answered by the helper"}]]}]
    )
    # Registered and asked while Iris is down; the fixture's first Iris lives in iris0/data.
    AgentRegistry(tmp_path / "iris0" / "data" / "agents.json").register(
        "helper", helper.bridge_url, token=helper.token
    )
    chat = -new_chat()
    asked = fake_telegram.user_says(chat, "@helper the backlog question")["message"]["message_id"]

    iris = telegram_iris()
    iris.wait_reply(chat, asked, "answered by the helper", timeout=60)
    assert iris.provider_calls() == [], "Iris's own model must not take an @agent message"

"""``@kind`` in a Telegram chat reaches a custom relay agent (spec 004) exactly as ``@agent``
reaches a bridge sub-agent: Iris's model is never called, the agent's progress and tool cards
show in the placeholder, and its reply lands in the same chat and topic."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from telegram_harness import TelegramIris, new_chat

from iris_runtime.testing.relay_agent import RelayAgent
from iris_runtime.testing.server import free_port

pytestmark = pytest.mark.slow


def test_a_mention_of_a_relay_agent_is_answered_in_the_chat(
    telegram_iris: Callable[..., TelegramIris], tmp_path: Path, socket_dir: Path
) -> None:
    reach = socket_dir / "reach.sock"
    agent = RelayAgent(free_port(), reach, tmp_path / "butler.jsonl").start()
    try:
        agents_d = tmp_path / "iris0" / "data" / "agents.d"
        agents_d.mkdir(parents=True)
        manifest = {"kind": "butler", "label": "Butler", "relay": f"http://127.0.0.1:{agent.port}/"}
        (agents_d / "butler.json").write_text(json.dumps(manifest))
        iris = telegram_iris(IRIS_REACH_SOCKET=str(reach))
        chat = -new_chat()
        asked = iris.fake.user_says(chat, "@butler slowtools", thread_id=7)["message"]["message_id"]
        reply = iris.wait_reply(chat, asked, "It argues three things.", timeout=60)
        assert reply.thread_id == 7 and reply.history[0] == "Thinking…"
        assert "Butler: → report.pdf" in reply.history, "the tool card as a status line"
        assert iris.provider_calls() == [], "Iris's model was never asked"
        again = iris.fake.user_says(chat, "@butler echo hello", thread_id=7)["message"][
            "message_id"
        ]
        iris.wait_reply(chat, again, "You said: hello")
        chats = {p["chat_id"] for p in agent.posts("message")}
        assert len(chats) == 1, "one chat per Telegram conversation"
    finally:
        agent.stop()

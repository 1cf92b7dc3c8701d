"""``@kind`` in a Telegram chat reaches a custom ACP agent (spec 004), hosted by Iris with the
official SDK: its reply lands in the chat's placeholder, and the chat command ``@kind /model``
picks the agent's model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from telegram_harness import TelegramIris, new_chat

from iris_runtime.testing import acp_agent

pytestmark = pytest.mark.slow


def test_a_mention_of_an_acp_agent_is_answered_and_its_model_chosen_in_the_chat(
    telegram_iris: Callable[..., TelegramIris], tmp_path: Path, socket_dir: Path
) -> None:
    acp_agent.install(
        tmp_path / "iris0" / "data" / "agents.d",
        tmp_path / "coder.jsonl",
        "coder",
        models=[{"id": "fast"}, {"id": "deep"}],
        modelEnv="TEST_AGENT_MODEL",
    )
    iris = telegram_iris(IRIS_REACH_SOCKET=str(socket_dir / "reach.sock"))
    chat = -new_chat()
    asked = iris.fake.user_says(chat, "@coder tools")["message"]["message_id"]
    # (Which progress lines show as placeholder edits depends on the edits' pacing: the SSE and
    # Web UI tests assert the progress itself.)
    reply = iris.wait_reply(chat, asked, "read it", timeout=60)
    assert reply.history[0] == "Thinking…"
    assert iris.provider_calls() == [], "Iris's model was never asked"
    picked = iris.fake.user_says(chat, "@coder /model deep")["message"]["message_id"]
    iris.wait_reply(chat, picked, "Coder uses deep from the next message.")
    env = iris.fake.user_says(chat, "@coder env")["message"]["message_id"]
    # The new model means a new process; without loadSession the owner is told, once.
    answer = iris.wait_reply(chat, env, prefix="This agent could not restore", timeout=60)
    assert answer.text.endswith("model=deep")

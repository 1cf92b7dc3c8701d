"""Helpers for the Telegram tests: a served Iris (``iris serve``, gunicorn) with this plugin,
talking to the fake Bot API, and a real sub-agent runtime for ``@agent`` routing. The fixtures
over them are in ``conftest.py``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris_runtime.testing.fake_telegram import BotMessage, FakeTelegram
from iris_runtime.testing.server import IrisServer

_chat_ids = itertools.count(5001)
ALLOWED_USER = 1001  # the fake's default sender
ALLOWED_CHAT = -1009001  # a group allowed as a whole (for senders without a user id)


def new_chat() -> int:
    """A chat id no other test in this run uses (tests may share one served Iris)."""
    return next(_chat_ids)


def telegram_env(fake: FakeTelegram, **extra: str) -> dict[str, str]:
    return {
        "TELEGRAM_BOT_TOKEN": fake.token,
        "IRIS_TELEGRAM_API_URL": fake.api_url,
        "IRIS_TELEGRAM_POLL_TIMEOUT_S": "2",
        "IRIS_TELEGRAM_RETRY_BASE_MS": "50",
        "IRIS_TELEGRAM_RETRY_MAX_MS": "400",
        "IRIS_TELEGRAM_ALLOWED_USERS": str(ALLOWED_USER),
        "IRIS_TELEGRAM_ALLOWED_CHATS": str(ALLOWED_CHAT),
        **extra,
    }


@dataclass
class TelegramIris:
    fake: FakeTelegram
    server: IrisServer
    script: Path
    provider_log: Path

    def rules(self, rules: list[dict[str, Any]]) -> None:
        """Replace the scripted provider's rules (re-read on every call)."""
        self.script.write_text(json.dumps({"rules": rules}))

    def provider_calls(self) -> list[dict[str, Any]]:
        if not self.provider_log.exists():
            return []
        return [json.loads(line) for line in self.provider_log.read_text().splitlines()]

    def log(self) -> str:
        return self.server.log_tail(100_000)

    def replies(self, chat: int, to: int) -> list[BotMessage]:
        """The bot's messages anchored to the user's message ``to``."""
        return [m for m in self.fake.bot_messages(chat) if m.reply_to == to]

    def wait(self, predicate: Callable[[FakeTelegram], Any], what: str, timeout: float = 30) -> Any:
        """``fake.wait_for``, with the end of Iris's log in the failure message."""
        try:
            return self.fake.wait_for(predicate, what, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- iris log ---\n{self.server.log_tail(60)}") from None

    def wait_reply(
        self,
        chat: int,
        to: int,
        text: str | None = None,
        timeout: float = 30,
        *,
        prefix: str | None = None,
    ) -> BotMessage:
        """The bot's message anchored to ``to`` once it shows ``text`` (or starts with
        ``prefix``; neither: any reply)."""

        def done(fake: FakeTelegram) -> BotMessage | None:
            for m in self.replies(chat, to):
                if (text is None or m.text == text) and (
                    prefix is None or m.text.startswith(prefix)
                ):
                    return m
            return None

        found: BotMessage = self.wait(
            done, f"a reply to {to} in {chat}: {text or prefix!r}", timeout
        )
        return found


def start_telegram_iris(
    directory: Path,
    fake: FakeTelegram,
    rules: list[dict[str, Any]] | None = None,
    **env: str,
) -> TelegramIris:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "script.json"
    script.write_text(json.dumps({"rules": rules or []}))
    provider_log = directory / "provider-calls.jsonl"
    server = IrisServer(
        directory / "data",
        env=telegram_env(
            fake,
            IRIS_PROVIDER="scripted",
            IRIS_SCRIPT_FILE=str(script),
            IRIS_SCRIPT_CALLS_FILE=str(provider_log),
            **env,
        ),
    )
    server.start()
    iris = TelegramIris(fake, server, script, provider_log)
    fake.wait_for(lambda f: f.calls_of("getUpdates"), "the first getUpdates")
    return iris

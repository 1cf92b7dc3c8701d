"""Served Iris against the fake Bot API when things go wrong or change: no token at all, a
restart between messages, another process polling with the same token, and a flaky platform.
Each test has its own Iris."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from telegram_harness import TelegramIris, new_chat, telegram_env

from iris_runtime.testing.fake_telegram import (
    CONFLICT_WEBHOOK,
    FakeTelegram,
    Reset,
    conflict,
    flood,
    server_error,
)
from iris_runtime.testing.server import IrisServer

pytestmark = pytest.mark.slow

StartIris = Callable[..., TelegramIris]


@dataclass
class IrisWithoutToken(IrisServer):
    """An Iris with no Telegram token from the shell: only ``telegram_token``, if given."""

    telegram_token: str | None = None

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for name in ("TELEGRAM_BOT_TOKEN", "TELEGRAM_BOT_TOKEN_FILE"):
            env.pop(name, None)
        if self.telegram_token is not None:
            env["TELEGRAM_BOT_TOKEN"] = self.telegram_token
        return env


@pytest.mark.parametrize("token", [None, ""])
def test_no_token_costs_nothing(
    tmp_path: Path, fake_telegram: FakeTelegram, token: str | None
) -> None:
    env = {"IRIS_TELEGRAM_API_URL": fake_telegram.api_url}  # pointed at the fake: never used
    server = IrisWithoutToken(tmp_path / "data", env=env, telegram_token=token).start()
    try:
        reply = server.post("/sessions/zero/message", json_body={"text": "hello"})
        assert reply.status == 200, reply.body
        answer = server.post("/channels/tg-42/events", json_body={"text": "x"})
        # Still Telegram's channel, refused: never "delivered" by the bridge catch-all.
        assert answer.status == 409, answer.body
        assert answer.json()["code"] == "transport_not_running"
        assert "telegram" in answer.json()["error"]
    finally:
        server.stop()
    assert fake_telegram.calls == [], "no connection to the Bot API"
    log = server.log_tail(100_000)
    assert "transports=bridge\n" in log
    assert "iris_telegram" not in log and "Telegram" not in log
    mentions = [line for line in log.splitlines() if "telegram" in line.lower()]
    assert all("events: watching" in line for line in mentions), mentions  # the events folders
    assert not (tmp_path / "data" / "telegram").exists()


def test_the_offset_survives_a_restart(telegram_iris: StartIris) -> None:
    iris = telegram_iris()
    fake, chat = iris.fake, new_chat()
    first = fake.user_says(chat, "one")["message"]["message_id"]
    second = fake.user_says(chat, "two")["message"]["message_id"]
    iris.wait_reply(chat, first, "echo: one")
    iris.wait_reply(chat, second, "echo: two")
    iris.server.stop()

    offset_file = iris.server.data_dir / "telegram" / f"offset-{fake.token.split(':')[0]}.json"
    saved = json.loads(offset_file.read_text())["offset"]
    third = fake.user_says(chat, "three, sent while Iris was down")
    assert third["update_id"] == saved  # the next update is exactly where the offset points
    polls_before = len(fake.calls_of("getUpdates"))

    iris.server.start()
    iris.wait_reply(chat, third["message"]["message_id"], "echo: three, sent while Iris was down")
    restarted = fake.calls_of("getUpdates")[polls_before:]
    assert restarted[0].params.get("offset") == saved
    assert [len(iris.replies(chat, m)) for m in (first, second)] == [1, 1], "nothing replayed"
    prompts = [c["prompt"] for c in iris.provider_calls()]
    assert prompts == ["one", "two", "three, sent while Iris was down"]
    iris.wait(lambda f: f.confirmed_offset == third["update_id"] + 1, "the offset confirmed")


def test_a_second_poller_is_named_once_and_polling_recovers(telegram_iris: StartIris) -> None:
    iris = telegram_iris()
    fake = iris.fake
    stop = threading.Event()

    def competitor() -> None:
        """Another process polling with the same token, as a misconfigured sub-agent would."""
        with requests.Session() as http:
            while not stop.is_set():
                http.post(f"{fake.api_url}/bot{fake.token}/getUpdates", json={"timeout": 1})

    thread = threading.Thread(target=competitor, daemon=True)
    thread.start()
    try:
        iris.wait(lambda f: "409 Conflict" in iris.log(), "the conflict to be reported")
        # Iris keeps trying (backing off) while the other poller runs.
        iris.wait(
            lambda f: len([c for c in f.calls_of("getUpdates") if c.status == 409]) >= 6,
            "several conflicts",
        )
    finally:
        stop.set()
        thread.join(10)
    chat = new_chat()
    asked = fake.user_says(chat, "are you there?")["message"]["message_id"]
    iris.wait_reply(chat, asked, "echo: are you there?")
    # The episode ends after a quiet period without a 409 (twice the poll timeout here).
    iris.wait(lambda f: "Telegram polling works again" in iris.log(), "the recovery line")
    log = iris.log()
    assert log.count("another process is polling Telegram with this same bot token") == 1
    assert "sub-agent must never reuse TELEGRAM_BOT_TOKEN" in log

    # A webhook set on the bot is the other cause of a 409, with its own explanation.
    fake.fail_next("getUpdates", conflict(CONFLICT_WEBHOOK), conflict(CONFLICT_WEBHOOK))
    iris.wait(lambda f: "a webhook is set for this bot" in iris.log(), "the webhook explanation")
    asked = fake.user_says(chat, "and now?")["message"]["message_id"]
    iris.wait_reply(chat, asked, "echo: and now?")
    assert iris.log().count("a webhook is set for this bot") == 1


def test_platform_errors_are_retried_and_the_reply_arrives(telegram_iris: StartIris) -> None:
    iris = telegram_iris(IRIS_LOG_LEVEL="debug")
    fake, chat = iris.fake, new_chat()
    fake.fail_next("getUpdates", Reset(), server_error(502))
    fake.fail_next("sendMessage", server_error(500), Reset(), flood(1))
    fake.fail_next("editMessageText", Reset(), server_error(503), flood(1))
    asked = fake.user_says(chat, "through the storm")["message"]["message_id"]
    reply = iris.wait_reply(chat, asked, "echo: through the storm", timeout=60)
    assert reply.history == ["Thinking…", "echo: through the storm"]
    assert [c.status for c in fake.calls_of("sendMessage")][:4] == [500, None, 429, 200]
    assert [c.status for c in fake.calls_of("editMessageText")] == [None, 503, 429, 200]
    assert len(fake.bot_messages(chat)) == 1, "a failed send was not duplicated"
    log = iris.log()
    assert "retrying in" in log
    assert fake.token not in log and fake.token.split(":")[1] not in log


def test_a_reply_that_cannot_be_delivered_is_kept(telegram_iris: StartIris) -> None:
    iris = telegram_iris(IRIS_TELEGRAM_RETRIES="3")
    fake, chat = iris.fake, new_chat()
    # The placeholder cannot be posted (3 attempts), nor the reply afterwards (3 more).
    fake.fail_next("sendMessage", *[server_error(500)] * 6)
    fake.user_says(chat, "into the void")
    log_file = iris.server.data_dir / f"tg-{chat}" / "log.jsonl"
    iris.wait(lambda f: "could not deliver the reply in" in iris.log(), "the delivery error")

    def logged_reply(f: object) -> bool:
        entries = [json.loads(line) for line in log_file.read_text().splitlines()]
        return bool(
            entries[-1]["role"] == "assistant" and entries[-1]["text"] == "echo: into the void"
        )

    iris.wait(logged_reply, "the reply in the channel's log")
    asked = fake.user_says(chat, "better now?")["message"]["message_id"]
    iris.wait_reply(chat, asked, "echo: better now?")  # and the next message works
    assert fake.token not in iris.log()


def test_a_revoked_token_is_explained(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    env = telegram_env(fake_telegram)
    env["TELEGRAM_BOT_TOKEN"] = "777000111:" + "R" * 35  # the fake does not know this one
    server = IrisServer(tmp_path / "data", env=env).start()
    try:
        fake_telegram.wait_for(lambda f: len(f.calls_of("getMe")) >= 3, "getMe retries")
    finally:
        server.stop()
    log = server.log_tail(100_000)
    assert log.count("Telegram rejected TELEGRAM_BOT_TOKEN (401 Unauthorized)") == 1
    assert "R" * 35 not in log


def test_by_default_nobody_is_answered_but_told_their_ids(telegram_iris: StartIris) -> None:
    iris = telegram_iris(IRIS_TELEGRAM_ALLOWED_USERS="", IRIS_TELEGRAM_ALLOWED_CHATS="")
    fake, chat = iris.fake, new_chat()
    first = fake.user_says(chat, "run rm -rf /", user_id=777)["message"]["message_id"]
    hint = iris.wait_reply(chat, first, prefix="This bot does not answer you yet")
    assert "user id is 777" in hint.text and f"chat's id is {chat}" in hint.text
    assert "IRIS_TELEGRAM_ALLOWED_USERS" in hint.text
    second = fake.user_says(chat, "hello?", user_id=777)["message"]["message_id"]
    later = fake.user_says(new_chat(), "me too", user_id=778)["message"]
    iris.wait_reply(later["chat"]["id"], later["message_id"], prefix="This bot does not")
    assert iris.replies(chat, second) == []  # once per chat per hour
    assert iris.provider_calls() == [], "the agent never ran"
    assert iris.log().count("nobody is allowed to talk to the bot yet") == 1


def test_only_allowed_users_or_chats_are_answered(telegram_iris: StartIris) -> None:
    allowed_chat = -new_chat()
    iris = telegram_iris(
        IRIS_TELEGRAM_ALLOWED_USERS="1001, 1002", IRIS_TELEGRAM_ALLOWED_CHATS=str(allowed_chat)
    )
    fake, chat = iris.fake, new_chat()
    stranger = fake.user_says(chat, "let me in", user_id=666)["message"]["message_id"]
    friend = fake.user_says(chat, "hi", user_id=1002)["message"]["message_id"]
    in_group = fake.user_says(allowed_chat, "from the group", user_id=666)["message"]
    iris.wait_reply(chat, friend, "echo: hi")
    iris.wait_reply(allowed_chat, in_group["message_id"], "echo: from the group")
    assert iris.replies(chat, stranger) == []  # lists set: strangers get no answer at all
    # Two chats run side by side, so their calls may reach the provider in either order.
    assert sorted(c["prompt"] for c in iris.provider_calls()) == ["from the group", "hi"]


def test_a_shutdown_loses_no_waiting_message(telegram_iris: StartIris) -> None:
    iris = telegram_iris()
    iris.rules([{"when": "hold the line", "turns": [[{"text": "holding"}, {"sleep": 120}]]}])
    fake, chat = iris.fake, new_chat()
    held = fake.user_says(chat, "hold the line")["message"]["message_id"]
    iris.wait_reply(chat, held, "Thinking…")
    # The placeholder comes before the model is asked; under load, so can the shutdown.
    iris.wait(
        lambda f: any(c["prompt"] == "hold the line" for c in iris.provider_calls()),
        "the first run to reach the model",
    )
    waiting = fake.user_says(chat, "answer me later")["message"]["message_id"]
    iris.wait_reply(chat, waiting, "Queued…")
    iris.server.stop()
    # The run in progress still delivered what it had; the waiting one was told it waits.
    [reply] = iris.replies(chat, held)
    assert reply.text != "Thinking…"
    [queued] = iris.replies(chat, waiting)
    assert queued.text.startswith("Not answered yet: Iris is restarting")
    iris.rules([])
    iris.server.start()
    iris.wait_reply(chat, waiting, "echo: answer me later")
    prompts = [c["prompt"] for c in iris.provider_calls()]
    assert prompts.count("hold the line") == 1, "a run that started is not run again"
    assert prompts.count("answer me later") == 1

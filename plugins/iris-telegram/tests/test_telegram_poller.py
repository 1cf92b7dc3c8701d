"""The poller in this process against the fake Bot API: order, the offset (saved only after the
hand-over, kept in memory when the disk refuses it), a bad update skipped, a shutdown leaving the
rest for the restart, and failures explained once per episode."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from iris_telegram.api import BotApi, RetryPolicy
from iris_telegram.offsets import OffsetStore
from iris_telegram.poller import Poller

from iris_runtime.errors import EngineStopping
from iris_runtime.testing.fake_telegram import (
    CONFLICT_OTHER_POLLER,
    FakeTelegram,
    conflict,
    server_error,
)

Handler = Callable[[dict[str, Any]], None]


@pytest.fixture
def run_poller(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> Iterator[Callable[..., tuple[Poller, threading.Event]]]:
    started: list[tuple[Poller, threading.Event]] = []

    def start(handle: Handler, store: OffsetStore | None = None) -> tuple[Poller, threading.Event]:
        stopping = threading.Event()
        api = BotApi(
            fake_telegram.token,
            fake_telegram.api_url,
            retry=RetryPolicy(attempts=3, base=0.02, cap=0.1),
            stopping=stopping,
        )
        poller = Poller(
            api,
            store or OffsetStore(tmp_path / "offset.json"),
            handle,
            poll_timeout=1,
            stopping=stopping,
            on_identity=lambda me: None,
        )
        poller.start()
        started.append((poller, stopping))
        return poller, stopping

    yield start
    for poller, stopping in started:
        stopping.set()
        poller.join(5)


def texts(updates: list[dict[str, Any]]) -> list[str]:
    return [u["message"]["text"] for u in updates]


def test_updates_in_order_and_the_offset_after_them(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], tmp_path: Path
) -> None:
    seen: list[dict[str, Any]] = []
    store = OffsetStore(tmp_path / "offset.json")
    run_poller(seen.append, store)
    sent = [fake_telegram.user_says(7, f"m{i}") for i in range(5)]
    fake_telegram.wait_for(lambda f: len(seen) == 5, "five updates")
    assert texts(seen) == ["m0", "m1", "m2", "m3", "m4"]
    fake_telegram.wait_for(lambda f: store.load() == sent[-1]["update_id"] + 1, "the saved offset")
    fake_telegram.wait_for(
        lambda f: f.confirmed_offset == sent[-1]["update_id"] + 1, "the offset confirmed"
    )


def test_a_bad_update_is_skipped_and_the_rest_handled(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def handle(update: dict[str, Any]) -> None:
        if update["message"]["text"] == "poison":
            raise ValueError("a bug")
        seen.append(update["message"]["text"])

    run_poller(handle)
    for text in ("before", "poison", "after"):
        fake_telegram.user_says(8, text)
    fake_telegram.wait_for(lambda f: seen == ["before", "after"], "the good updates")
    assert "could not handle Telegram update" in caplog.text


def test_updates_without_a_numeric_id_are_skipped(tmp_path: Path) -> None:
    seen: list[Any] = []
    poller = Poller(
        BotApi("1:x", "http://127.0.0.1:9"),
        OffsetStore(tmp_path / "offset.json"),
        seen.append,
        poll_timeout=1,
        stopping=threading.Event(),
        on_identity=lambda me: None,
    )
    updates: list[Any] = [{"update_id": "7"}, "junk", {"update_id": 5}, {"update_id": True}]
    assert poller._hand_over(updates) == (6, False)
    assert seen == [{"update_id": 5}]


def test_shutting_down_leaves_the_rest_for_the_restart(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], tmp_path: Path
) -> None:
    seen: list[str] = []

    def handle(update: dict[str, Any]) -> None:
        if update["message"]["text"] == "too late":
            raise EngineStopping("shutting down")
        seen.append(update["message"]["text"])

    store = OffsetStore(tmp_path / "offset.json")
    poller, _ = run_poller(handle, store)
    first = fake_telegram.user_says(9, "in time")
    late = fake_telegram.user_says(9, "too late")
    fake_telegram.user_says(9, "after that")
    fake_telegram.wait_for(
        lambda f: [u["update_id"] for u in store.load_state()[1]] == [late["update_id"]],
        "the refused update kept for the restart",
    )
    poller.join(5)
    assert seen == ["in time"] and first["update_id"] + 1 == late["update_id"]


def test_an_unwritable_offset_does_not_stop_polling(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    blocked = tmp_path / "offset.json"
    blocked.mkdir()  # a directory where the file should be: every save fails
    seen: list[str] = []
    run_poller(lambda u: seen.append(u["message"]["text"]), OffsetStore(blocked))
    fake_telegram.user_says(10, "one")
    fake_telegram.wait_for(lambda f: seen == ["one"], "the first update")
    fake_telegram.user_says(10, "two")
    fake_telegram.wait_for(lambda f: seen == ["one", "two"], "the second, not the first again")
    assert "could not save the Telegram offset" in caplog.text


def test_failures_are_explained_once_per_episode(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake_telegram.fail_next("getUpdates", *[conflict()] * 4, *[server_error(502)] * 3)
    seen: list[str] = []
    run_poller(lambda u: seen.append(u["message"]["text"]))
    fake_telegram.user_says(11, "hello")
    fake_telegram.wait_for(lambda f: seen == ["hello"], "the update after the failures")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(errors) == 1 and CONFLICT_OTHER_POLLER in errors[0]
    assert "another process is polling Telegram with this same bot token" in errors[0]
    assert len(warnings) == 1 and "polling retries with backoff" in warnings[0]
    assert "Telegram polling works again" in caplog.text


def test_a_competing_poller_is_one_episode_with_one_error(
    fake_telegram: FakeTelegram, run_poller: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Another process polling with the same token takes turns with this one (each poll ends the
    other's): the polls that work in between must not end the episode and log it again."""
    caplog.set_level(logging.INFO)
    poller, _ = run_poller(lambda u: None)
    fake_telegram.wait_for(lambda f: poller.polls > 0, "the first poll")
    url = f"{fake_telegram.api_url}/bot{fake_telegram.token}/getUpdates"
    conflicts_before = len(fake_telegram.calls_of("getUpdates"))
    deadline = time.monotonic() + 6.0
    with requests.Session() as other:
        while time.monotonic() < deadline:
            answer = other.post(url, json={"timeout": 1}, timeout=10)
            # Like a poller backing off: long enough for a poll of ours to work in between.
            time.sleep(1.3 if answer.status_code == 409 else 0.05)
    assert len(fake_telegram.calls_of("getUpdates")) - conflicts_before >= 6
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and CONFLICT_OTHER_POLLER in errors[0]
    assert "Telegram polling works again" not in caplog.text
    fake_telegram.wait_for(
        lambda f: "Telegram polling works again" in caplog.text,
        "the episode to end after a quiet period",
        timeout=poller.conflict_quiet + 10,
    )
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1

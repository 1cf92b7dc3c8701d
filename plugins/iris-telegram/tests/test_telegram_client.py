"""The Bot API client and the sender against the fake Bot API: retries with backoff on 5xx, 429
(``retry_after``) and connection resets, no retry on permanent errors, the 409 conflict, the
token kept out of exceptions and logs (urllib3's debug lines included), downloads, chunked
delivery with its backstops."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from iris_telegram import redaction
from iris_telegram.api import (
    BotApi,
    RetryPolicy,
    TelegramConflict,
    TelegramError,
    TelegramStopped,
    TelegramUnauthorized,
)
from iris_telegram.sender import ChatSender, Target

from iris_runtime.testing.fake_telegram import (
    CONFLICT_OTHER_POLLER,
    MESSAGE_LIMIT,
    Fail,
    FakeTelegram,
    Reset,
    conflict,
    flood,
    server_error,
    utf16_len,
)
from iris_runtime.transport_kit.edit_pacing import EditPacer as EditThrottle

FAST = RetryPolicy(attempts=5, base=0.01, cap=0.05)


@pytest.fixture
def api(fake_telegram: FakeTelegram) -> BotApi:
    fake_telegram.chat(42)
    return BotApi(fake_telegram.token, fake_telegram.api_url, retry=FAST)


def test_a_call_returns_the_result(api: BotApi, fake_telegram: FakeTelegram) -> None:
    assert api.call("getMe")["username"] == "iris_test_bot"
    sent = api.call("sendMessage", {"chat_id": 42, "text": "hi"})
    assert sent["text"] == "hi"
    assert fake_telegram.calls_of("sendMessage")[0].params == {"chat_id": 42, "text": "hi"}


def test_transient_failures_are_retried(api: BotApi, fake_telegram: FakeTelegram) -> None:
    fake_telegram.fail_next("sendMessage", server_error(500), Reset(), server_error(502), flood(1))
    assert api.call("sendMessage", {"chat_id": 42, "text": "made it"})["text"] == "made it"
    calls = fake_telegram.calls_of("sendMessage")
    assert [c.status for c in calls] == [500, None, 502, 429, 200]
    # The 429 was honoured: the retry came no sooner than retry_after (1 s) later.
    assert calls[4].at - calls[3].at >= 0.9
    assert [m.text for m in fake_telegram.bot_messages(42)] == ["made it"]


def test_retries_are_bounded(api: BotApi, fake_telegram: FakeTelegram) -> None:
    fake_telegram.fail_next("sendMessage", *[server_error(503)] * 10)
    with pytest.raises(TelegramError) as caught:
        api.call("sendMessage", {"chat_id": 42, "text": "x"})
    assert caught.value.error_code == 503
    assert len(fake_telegram.calls_of("sendMessage")) == FAST.attempts


def test_permanent_errors_are_not_retried(api: BotApi, fake_telegram: FakeTelegram) -> None:
    with pytest.raises(TelegramError) as caught:
        api.call("sendMessage", {"chat_id": 999, "text": "x"})
    assert caught.value.error_code == 400 and "chat not found" in caught.value.description
    assert len(fake_telegram.calls_of("sendMessage")) == 1


def test_conflict_and_unauthorized_are_their_own_errors(
    api: BotApi, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.fail_next("getUpdates", conflict())
    with pytest.raises(TelegramConflict) as caught:
        api.call("getUpdates", {"timeout": 0})
    assert caught.value.description == CONFLICT_OTHER_POLLER
    wrong = BotApi("123:wrongwrongwrongwrongwrongwrong", fake_telegram.api_url, retry=FAST)
    with pytest.raises(TelegramUnauthorized):
        wrong.call("getMe")


def test_a_real_second_poller_gets_a_conflict(api: BotApi, fake_telegram: FakeTelegram) -> None:
    results: list[object] = []

    def poll() -> None:
        try:
            results.append(api.call("getUpdates", {"timeout": 10}, retry=False))
        except TelegramError as exc:
            results.append(exc)

    first = threading.Thread(target=poll)
    first.start()
    fake_telegram.wait_for(lambda f: len(f.calls_of("getUpdates")) == 1, "the first poll")
    other = BotApi(fake_telegram.token, fake_telegram.api_url, retry=FAST)
    assert other.call("getUpdates", {"timeout": 0}) == []
    first.join(10)
    assert isinstance(results[0], TelegramConflict)


def test_waiting_to_retry_ends_when_stopping(fake_telegram: FakeTelegram) -> None:
    stopping = threading.Event()
    slow = BotApi(fake_telegram.token, fake_telegram.api_url, stopping=stopping)
    fake_telegram.fail_next("getMe", flood(600))
    threading.Timer(0.2, stopping.set).start()
    with pytest.raises(TelegramStopped):
        slow.call("getMe")


def test_the_token_never_leaves_in_errors_or_logs(
    fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    redaction.install()
    try:
        caplog.set_level(logging.DEBUG)
        api = BotApi(fake_telegram.token, fake_telegram.api_url, retry=FAST)
        fake_telegram.chat(42)
        fake_telegram.fail_next("sendMessage", Reset(), server_error(500))
        api.call("sendMessage", {"chat_id": 42, "text": "x"})
        # A server that is gone: requests' ConnectionError names the URL, token and all.
        dead = BotApi(fake_telegram.token, "http://127.0.0.1:9", retry=FAST)
        with pytest.raises(TelegramError) as caught:
            dead.call("getMe")
        assert "network error" in caught.value.description
        for text in (str(caught.value), repr(caught.value), repr(api), repr(dead)):
            assert fake_telegram.token not in text
        assert caught.value.__cause__ is None and caught.value.__context__ is None
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "/bot" in logged, "urllib3's debug lines were captured"
        assert fake_telegram.token not in logged
        assert fake_telegram.token.split(":")[1] not in logged
    finally:
        redaction.uninstall()


def _reachable_text(exc: BaseException) -> str:
    """Everything an exception keeps alive: its chain, its attributes, its frames' locals."""
    seen: list[str] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None:
            continue
        seen.append(repr(current))
        seen.extend(repr(v) for v in vars(current).values())
        pending += [current.__context__, current.__cause__]
        trace = current.__traceback__
        while trace is not None:
            if trace.tb_frame.f_code.co_filename != __file__:  # not this test's own frames
                seen.extend(repr(v) for v in trace.tb_frame.f_locals.values())
            trace = trace.tb_next
    return "\n".join(seen)


def test_the_token_is_not_reachable_from_errors(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    dead = BotApi(fake_telegram.token, "http://127.0.0.1:9", retry=FAST)
    secret = fake_telegram.token.split(":")[1]
    for attempt in (
        lambda: dead.call("getMe", retry=False),
        lambda: dead.call("getMe"),
        lambda: dead.download("documents/x.bin", tmp_path / "x.bin", 1000),
    ):
        with pytest.raises(TelegramError) as caught:
            attempt()
        assert caught.value.__context__ is None
        assert secret not in _reachable_text(caught.value)


def test_downloads(api: BotApi, fake_telegram: FakeTelegram, tmp_path: Path) -> None:
    stored = fake_telegram.add_file(b"x" * 200_000)
    fake_telegram.fail_next("*", Reset())
    destination = tmp_path / "f.bin"
    assert api.download(stored.path, destination, 1_000_000) == 200_000
    assert destination.read_bytes() == b"x" * 200_000
    with pytest.raises(TelegramError, match="larger than"):
        api.download(stored.path, tmp_path / "g.bin", 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]  # no partial file left
    with pytest.raises(TelegramError):
        api.download("documents/missing.bin", tmp_path / "h.bin", 1000)


# -- the sender -----------------------------------------------------------------------------------


def sender_for(fake: FakeTelegram) -> ChatSender:
    return ChatSender(BotApi(fake.token, fake.api_url, retry=FAST), EditThrottle(0.0))


def test_a_long_reply_replaces_the_placeholder_then_follows(fake_telegram: FakeTelegram) -> None:
    fake_telegram.chat(-100, forum=True).topics.add(5)
    sender = sender_for(fake_telegram)
    target = Target(-100, thread_id=5)
    placeholder = sender.send_html(target, "<i>Thinking…</i>")
    reply = "\n\n".join(f"paragraph {i} " + "word " * 150 for i in range(30))
    ids = sender.deliver(target, reply, placeholder=placeholder)
    assert ids[0] == placeholder and len(ids) > 1
    messages = fake_telegram.bot_messages(-100)
    assert [m.message_id for m in messages] == ids
    assert all(m.thread_id == 5 for m in messages)
    assert all(utf16_len(m.text) <= MESSAGE_LIMIT for m in messages)
    assert messages[0].history[0] == "Thinking…"


def test_backstops(fake_telegram: FakeTelegram) -> None:
    fake_telegram.chat(42)
    sender = sender_for(fake_telegram)
    target = Target(42)
    # Telegram says "too long" anyway: the chunk is re-split at half the size.
    fake_telegram.fail_next("sendMessage", Fail(400, "Bad Request: message is too long"))
    ids = sender.deliver(target, "word " * 800)
    assert len(ids) == 2
    # Telegram cannot parse a chunk: it goes out as plain text instead of being lost.
    fake_telegram.fail_next("sendMessage", Fail(400, "Bad Request: can't parse entities: x"))
    [plain] = sender.deliver(target, "**important**")
    sent = next(m for m in fake_telegram.bot_messages(42) if m.message_id == plain)
    assert sent.text == "important" and sent.html is None
    # The placeholder was deleted meanwhile: the reply is posted as a new message.
    placeholder = sender.send_html(target, "<i>Thinking…</i>")
    sender.delete(target, placeholder)
    [new] = sender.deliver(target, "final", placeholder=placeholder)
    assert new != placeholder
    # Editing to the same text is not an error.
    sender.deliver(target, "final", placeholder=new)

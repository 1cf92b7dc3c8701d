"""The shared retry machinery, without any network: backoff, retry-after, the retry loop, the
stream relay, failure classification and tool-argument parsing."""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Generator, Iterator

import httpx2
import pytest

from iris_runtime.engine.provider import Notice, ProviderError, ProviderEvent, TextDelta
from iris_runtime.providers.retry import (
    MAX_RETRY_AFTER,
    RAW_ARGUMENTS_KEY,
    Failure,
    Item,
    RetryPolicy,
    connection_failure,
    parse_arguments,
    parse_retry_after,
    relay,
    run_with_retries,
    status_failure,
    stream_error_failure,
)

OVERLOADED = Failure("overloaded (529)", True, "Overloaded")


class Sleeps:
    """A sleeper that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float, abort: threading.Event) -> bool:
        self.waits.append(seconds)
        return abort.is_set()


class Attempts:
    """An attempt function playing ``outcomes`` in turn, counting its calls."""

    def __init__(self, *outcomes: list[Item]) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def __call__(self) -> Iterator[Item]:
        self.calls += 1
        return iter(self.outcomes.pop(0))


def run(policy: RetryPolicy, *outcomes: list[Item]) -> tuple[list[ProviderEvent], int]:
    attempts = Attempts(*outcomes)
    events = list(run_with_retries("p", attempts, policy, threading.Event()))
    return events, attempts.calls


# --- backoff -------------------------------------------------------------------------------------


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(10, random=lambda: 1.0)
    assert [policy.delay(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert RetryPolicy(10, random=lambda: 0.0).delay(5) == 0


def test_full_jitter_stays_within_bounds_and_varies() -> None:
    policy = RetryPolicy(10)
    for retry in range(8):
        delays = [policy.delay(retry) for _ in range(200)]
        ceiling = min(30.0, 2.0**retry)
        assert all(0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100  # jittered, not a fixed schedule
        assert max(delays) > ceiling / 2


def test_retry_after_overrides_backoff() -> None:
    policy = RetryPolicy(3, random=lambda: 1.0)
    assert policy.delay(0, retry_after=7.5) == 7.5
    assert policy.delay(4, retry_after=0.0) == 0.0


# --- retry-after parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the precise one wins
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "whenever"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str] | None, expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    later = email.utils.formatdate(now + 12, usegmt=True)
    assert parse_retry_after({"retry-after": later}, now=now) == pytest.approx(12)
    earlier = email.utils.formatdate(now - 60, usegmt=True)
    assert parse_retry_after({"retry-after": earlier}, now=now) == 0.0


# --- the retry loop ------------------------------------------------------------------------------


def test_success_needs_no_retry() -> None:
    events, calls = run(RetryPolicy(3), [TextDelta("hi")])
    assert events == [TextDelta("hi")] and calls == 1


def test_retry_then_success_with_a_notice() -> None:
    sleeps = Sleeps()
    policy = RetryPolicy(3, sleep=sleeps)
    events, calls = run(
        policy, [Failure("overloaded (529)", True, retry_after=3.0)], [TextDelta("ok")]
    )
    assert events == [Notice("retrying in 3s: overloaded (529)"), TextDelta("ok")]
    assert calls == 2 and sleeps.waits == [3.0]


def test_short_waits_are_shown_with_a_decimal() -> None:
    policy = RetryPolicy(3, sleep=Sleeps())
    events, _ = run(policy, [Failure("rate limited (429)", True, retry_after=0.25)], [])
    assert events == [Notice("retrying in 0.2s: rate limited (429)")]


def test_exhaustion_names_the_last_failure() -> None:
    sleeps = Sleeps()
    events, calls = run(RetryPolicy(2, sleep=sleeps), [OVERLOADED], [OVERLOADED], [OVERLOADED])
    assert calls == 3 and len(sleeps.waits) == 2
    assert [type(e) for e in events] == [Notice, Notice, ProviderError]
    assert events[-1] == ProviderError(
        "p: giving up after 3 attempts: overloaded (529): Overloaded", retryable=True
    )


def test_zero_retries_means_one_attempt() -> None:
    events, calls = run(RetryPolicy(0, sleep=Sleeps()), [OVERLOADED])
    assert calls == 1
    assert events == [
        ProviderError("p: giving up after 1 attempt: overloaded (529): Overloaded", True)
    ]


def test_final_failures_are_not_retried() -> None:
    failure = Failure("request rejected (400)", False, "max_tokens: too large")
    events, calls = run(RetryPolicy(3, sleep=Sleeps()), [failure])
    assert calls == 1
    assert events == [ProviderError("p: request rejected (400): max_tokens: too large")]


def test_no_retry_once_output_was_delivered() -> None:
    failure = Failure("connection error", True)
    events, calls = run(RetryPolicy(3, sleep=Sleeps()), [TextDelta("half"), failure])
    assert calls == 1
    assert events[0] == TextDelta("half")
    assert events[1] == ProviderError("p: stream failed after partial output: connection error")


def test_an_excessive_retry_after_gives_up_at_once() -> None:
    failure = Failure("rate limited (429)", True, retry_after=MAX_RETRY_AFTER + 1)
    events, calls = run(RetryPolicy(3, sleep=Sleeps()), [failure])
    assert calls == 1 and isinstance(events[0], ProviderError)
    assert "asked to wait 61s" in events[0].message


def test_abort_interrupts_the_wait() -> None:
    abort = threading.Event()
    failure = Failure("overloaded (529)", True, retry_after=20.0)
    attempts = Attempts([failure], [TextDelta("never")])
    threading.Timer(0.2, abort.set).start()
    started = time.monotonic()
    events = list(run_with_retries("p", attempts, RetryPolicy(3), abort))
    assert time.monotonic() - started < 2
    assert events == [Notice("retrying in 20s: overloaded (529)")]
    assert attempts.calls == 1


# --- failure classification ----------------------------------------------------------------------


def test_status_classification() -> None:
    unauthorized = status_failure(401, "invalid x-api-key", {}, key_source="ANTHROPIC_API_KEY")
    assert not unauthorized.retryable
    assert "ANTHROPIC_API_KEY" in unauthorized.describe()
    assert not status_failure(400, "bad", {}, key_source="K").retryable
    assert not status_failure(403, "no", {}, key_source="K").retryable
    assert not status_failure(404, "no model", {}, key_source="K").retryable
    limited = status_failure(429, "slow down", {"retry-after": "4"}, key_source="K")
    assert limited.retryable and limited.retry_after == 4 and limited.reason == "rate limited (429)"
    assert status_failure(529, "Overloaded", {}, key_source="K").reason == "overloaded (529)"
    assert status_failure(503, "x", {}, key_source="K", error_type="overloaded_error").retryable
    assert status_failure(500, "x", {}, key_source="K").reason == "server error (500)"


def test_the_servers_should_retry_hint_wins() -> None:
    assert not status_failure(500, "x", {"x-should-retry": "false"}, key_source="K").retryable
    assert status_failure(409, "x", {"X-Should-Retry": "true"}, key_source="K").retryable


def test_stream_errors() -> None:
    overloaded = stream_error_failure("overloaded_error", "Overloaded")
    assert overloaded.retryable and overloaded.describe() == "overloaded (in stream): Overloaded"
    assert not stream_error_failure("invalid_request_error", "bad").retryable


def test_connection_failures() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1:1/v1/messages")
    wrapped = RuntimeError("Connection error.")
    wrapped.__cause__ = httpx2.ConnectTimeout("timed out", request=request)
    assert connection_failure(wrapped, timeout=120).reason == "could not connect within 10s"
    stalled = connection_failure(httpx2.ReadTimeout("timed out", request=request), timeout=5)
    assert stalled.retryable and stalled.reason == "no data for 5s (stream stalled)"
    dropped = httpx2.RemoteProtocolError("peer closed connection", request=request)
    failure = connection_failure(dropped, timeout=5)
    assert failure.retryable
    assert failure.describe() == "connection error: RemoteProtocolError: peer closed connection"


def test_details_are_clipped() -> None:
    failure = status_failure(500, "<html>" + "x" * 5000, {}, key_source="K")
    assert len(failure.detail) <= 300


# --- tool arguments ------------------------------------------------------------------------------


def test_parse_arguments() -> None:
    assert parse_arguments('{"path": "a"}') == {"path": "a"}
    assert parse_arguments("") == {}
    assert parse_arguments('{"path": "a"') == {RAW_ARGUMENTS_KEY: '{"path": "a"'}
    assert parse_arguments("[1, 2]") == {RAW_ARGUMENTS_KEY: "[1, 2]"}


# --- the relay -----------------------------------------------------------------------------------


def test_relay_hands_over_items_in_order() -> None:
    def produce() -> Generator[Item, None, None]:
        yield TextDelta("a")
        yield TextDelta("b")

    assert list(relay(produce, threading.Event(), 5)) == [TextDelta("a"), TextDelta("b")]


def test_relay_returns_promptly_on_abort_while_the_producer_blocks() -> None:
    release = threading.Event()
    abort = threading.Event()

    def produce() -> Generator[Item, None, None]:
        yield TextDelta("a")
        release.wait(10)
        yield TextDelta("late")

    items = relay(produce, abort, 30)
    assert next(items) == TextDelta("a")
    abort.set()
    started = time.monotonic()
    assert list(items) == []
    assert time.monotonic() - started < 0.5
    release.set()


def test_relay_reports_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("iris_runtime.providers.retry.STALL_GRACE", 0.0)
    release = threading.Event()

    def produce() -> Generator[Item, None, None]:
        release.wait(10)
        yield TextDelta("late")

    started = time.monotonic()
    items = list(relay(produce, threading.Event(), 0.3))
    release.set()
    assert time.monotonic() - started < 2
    assert len(items) == 1 and isinstance(items[0], Failure) and items[0].retryable


def test_relay_turns_a_producer_bug_into_a_final_failure() -> None:
    def produce() -> Generator[Item, None, None]:
        yield TextDelta("a")
        raise RuntimeError("boom")

    items = list(relay(produce, threading.Event(), 5))
    assert items[0] == TextDelta("a")
    assert isinstance(items[1], Failure) and not items[1].retryable
    assert "boom" in items[1].describe()

"""SlackApi in-process against the wire-level fake: retries that must not duplicate a post, and
edit pacing that holds for every attempt."""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from iris_slack.api import SlackApi, SlackError, classify
from iris_slack.config import SlackConfig
from iris_slack.ordering import OrderedLanes
from slack_testkit import slack_fake, stopped_clean

from iris_runtime.testing.fake_slack import (
    ApplyThenDrop,
    DropConnection,
    FakeSlack,
    HttpFailure,
)
from iris_runtime.transport_kit.edit_pacing import EditPacer


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    yield from stopped_clean(slack_fake())


def api_for(fake: FakeSlack) -> SlackApi:
    config = SlackConfig(fake.app_token, fake.bot_token, fake.api_url)
    api = SlackApi(config, attempts=4, base_delay=0.01, max_delay=0.02)
    api.auth_test()
    return api


def bot_texts(fake: FakeSlack, channel: str) -> list[str]:
    return [m.text for m in fake.bot_messages(channel) if not m.deleted]


@pytest.mark.parametrize("thread", [False, True])
def test_a_post_applied_before_the_connection_reset_is_not_posted_twice(
    fake: FakeSlack, thread: bool
) -> None:
    api = api_for(fake)
    parent = api.post_message("CGENERAL1", "parent") if thread else None
    fake.inject("chat.postMessage", ApplyThenDrop())
    ts = api.post_message("CGENERAL1", "exactly once", parent)
    assert bot_texts(fake, "CGENERAL1").count("exactly once") == 1
    [posted] = [m for m in fake.bot_messages("CGENERAL1") if m.text == "exactly once"]
    assert posted.ts == ts and posted.thread_ts == parent


def test_a_post_that_never_arrived_is_sent_again(fake: FakeSlack) -> None:
    api = api_for(fake)
    fake.inject("chat.postMessage", DropConnection())
    api.post_message("CGENERAL1", "second try")
    assert bot_texts(fake, "CGENERAL1") == ["second try"]


def test_every_attempt_of_an_edit_takes_its_own_paced_slot(fake: FakeSlack) -> None:
    api = api_for(fake)
    ts = api.post_message("CGENERAL1", "placeholder")
    pacer = EditPacer(interval=0.3)

    def slot() -> AbstractContextManager[None]:
        return pacer.slot("CGENERAL1", time.sleep)

    fake.inject("chat.update", HttpFailure(503, "service_unavailable"), HttpFailure(500))
    api.update_message("CGENERAL1", ts, "edited", slot=slot)
    api.update_message("CGENERAL1", ts, "edited again", slot=slot)
    times = [c.at for c in fake.calls("chat.update")]
    assert len(times) == 4
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.3


@pytest.mark.parametrize(
    "error", ["token_revoked", "account_inactive", "missing_scope", "invalid_auth"]
)
def test_refused_credentials_are_final(error: str) -> None:
    failure = classify("auth.test", SlackError("auth.test", error))
    assert failure.refused and not failure.transient


def test_the_sdk_logger_builds_no_debug_bodies_unless_asked() -> None:
    config = SlackConfig("xapp-x", "xoxb-x", "http://127.0.0.1:9/api/")
    logging.getLogger("iris_slack.sdk").setLevel(logging.NOTSET)
    api = SlackApi(config)
    assert api.client.logger.level == logging.INFO


def test_a_download_is_streamed_and_capped(fake: FakeSlack, tmp_path: Path) -> None:
    api = api_for(fake)
    info = fake.add_file("big.bin", b"x" * 200_000)
    target = tmp_path / "big.bin"
    api.download(info["url_private_download"], 300_000, target)
    assert target.read_bytes() == b"x" * 200_000 and target.stat().st_mode & 0o777 == 0o600
    with pytest.raises(SlackError, match="file_too_large"):
        api.download(info["url_private_download"], 100_000, target)
    assert not target.exists()


def test_events_dropped_at_shutdown_are_counted_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lanes = OrderedLanes(workers=1)
    release = threading.Event()
    started = threading.Event()
    handled: list[int] = []

    def first() -> None:
        started.set()
        release.wait(5)

    lanes.submit("C1", first)
    started.wait(5)
    for number in range(3):
        lanes.submit("C1", functools.partial(handled.append, number))
    with caplog.at_level(logging.WARNING, logger="iris_slack.ordering"):
        lanes.shutdown()
    release.set()
    [line] = [r.getMessage() for r in caplog.records if "not handled" in r.getMessage()]
    assert "3 received event(s)" in line
    time.sleep(0.1)
    assert handled == []

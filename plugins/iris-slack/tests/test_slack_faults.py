"""Slack misbehaving: 5xx answers, rate limits, dropped HTTP connections, a dropped or refreshed
Socket Mode connection, duplicate deliveries, Slack down at start-up. Every reply must arrive."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_testkit import log_entries, serve, settled_reply, slack_fake, stopped_clean, write_rules

from iris_runtime.testing.fake_slack import (
    DropConnection,
    FakeSlack,
    HttpFailure,
    RateLimited,
)
from iris_runtime.testing.server import IrisServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlack]:
    fake = slack_fake()
    # Slack is struggling while Iris starts: it must keep trying, not give up.
    fake.inject("auth.test", HttpFailure(503, "service_unavailable"), DropConnection())
    fake.inject("apps.connections.open", HttpFailure(500), RateLimited(retry_after=1))
    yield from stopped_clean(fake)


@pytest.fixture(scope="module")
def iris(base: Path, fake: FakeSlack) -> Iterator[IrisServer]:
    script = write_rules(base / "script.json", [])
    server = serve(base / "data", fake, script, IRIS_SCRIPT_CALLS_FILE=str(base / "calls.jsonl"))
    yield server
    server.stop()


def test_start_up_waits_out_slack_errors(fake: FakeSlack, iris: IrisServer) -> None:
    auth = fake.calls("auth.test")
    assert [c.status for c in auth] == [503, 0, 200]  # 503, dropped, then fine
    opened = fake.calls("apps.connections.open")
    assert [c.status for c in opened][:3] == [500, 429, 200]
    assert opened[2].at - opened[1].at >= 0.9  # Retry-After was honoured


def test_web_api_failures_are_retried_and_the_reply_still_arrives(
    fake: FakeSlack, iris: IrisServer
) -> None:
    fake.add_channel("CFAULT001", "faults")
    fake.inject("chat.postMessage", DropConnection(), HttpFailure(502, "bad_gateway"))
    fake.inject(
        "chat.update",
        HttpFailure(500),
        RateLimited(retry_after=1),
        HttpFailure(503, "service_unavailable"),
    )
    ts = fake.mention("CFAULT001", "through the storm")
    [reply] = settled_reply(fake, "CFAULT001", ts, "echo: through the storm")
    posts = [c for c in fake.calls("chat.postMessage") if c.params.get("channel") == "CFAULT001"]
    assert [c.status for c in posts] == [0, 502, 200]  # the placeholder got through
    edits = [c for c in fake.calls("chat.update") if c.params.get("channel") == "CFAULT001"]
    assert [c.status for c in edits] == [500, 429, 503, 200]
    assert edits[2].at - edits[1].at >= 0.9  # waited for Retry-After
    assert reply.current_text == "echo: through the storm"
    assert fake.pending_faults("chat.update") == 0


def test_a_dropped_socket_reconnects_and_no_event_is_lost(
    fake: FakeSlack, iris: IrisServer
) -> None:
    opened = fake.connections_opened
    dropped = time.monotonic()
    fake.drop_connections()
    ts = fake.mention("CGENERAL1", "after the drop")  # queued by Slack until a connection is up
    settled_reply(fake, "CGENERAL1", ts, "echo: after the drop")
    assert fake.connections_opened > opened
    # The end of the stream is noticed at once, and the monitor replaces the connection at its
    # next check (every 5 s), not after five failed pings.
    assert time.monotonic() - dropped < 15


def test_a_disconnect_request_moves_to_a_new_connection(fake: FakeSlack, iris: IrisServer) -> None:
    opened = fake.connections_opened
    fake.request_disconnect()
    fake.wait_for(lambda f: f.connections_opened > opened, "a new connection")
    ts = fake.mention("CGENERAL1", "after the refresh")
    settled_reply(fake, "CGENERAL1", ts, "echo: after the refresh")


def test_a_duplicate_delivery_runs_once(fake: FakeSlack, iris: IrisServer) -> None:
    fake.add_channel("CDUPE0001", "dupes")
    text = f"<@{fake.bot_user_id}> only once"
    ts = "1700000000.000777"
    event = {"type": "app_mention", "channel": "CDUPE0001", "user": "UANA00001", "text": text}
    event.update(ts=ts, event_ts=ts)
    fake.send_event(event, event_id="EvDUPLICATE1")
    fake.send_event(event, event_id="EvDUPLICATE1")  # Slack retried: same event id
    fake.send_event({**event, "type": "message", "channel_type": "channel"})  # its message event
    fake.send_event(event, event_id="EvDUPLICATE2")  # same message, new id: still one run
    settled_reply(fake, "CDUPE0001", ts, "echo: only once")
    marker = fake.mention("CDUPE0001", "a later message")
    settled_reply(fake, "CDUPE0001", marker, "echo: a later message")
    runs = [e for e in log_entries(iris, "CDUPE0001") if e.get("text") == "only once"]
    assert len(runs) == 1
    prompts = [json.loads(line)["prompt"] for line in (iris.data_dir.parent / "calls.jsonl").open()]
    assert prompts.count("only once") == 1


def test_messages_of_one_channel_run_in_the_order_they_were_sent(
    fake: FakeSlack, iris: IrisServer
) -> None:
    fake.add_channel("CORDER001", "order")
    sent = [fake.mention("CORDER001", f"number {i}") for i in range(5)]
    for i, ts in enumerate(sent):
        settled_reply(fake, "CORDER001", ts, f"echo: number {i}")
    started = [e["text"] for e in log_entries(iris, "CORDER001") if e.get("role") == "user"]
    assert started == [f"number {i}" for i in range(5)]

"""``show_logged_message``: a message Iris has already logged (a sub-agent's announce) is shown in
the thread the run came from, chunked and escaped like every post, and never logged again.

An in-process runtime (the real plugin host, engine and Slack transport) connected to the
wire-level fake Slack through ``slack_sdk``: the engine's announce path calls this method on the
transport it owns, and the test holds that same transport."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_testkit import replies, slack_fake, stopped_clean, wait_until

from iris_runtime.config import Settings
from iris_runtime.engine.transport import LoggedMessagePoster
from iris_runtime.errors import NoSuchChannel
from iris_runtime.runtime import Runtime
from iris_runtime.testing.fake_slack import FakeSlack

CHANNEL = "CGENERAL1"
# Over one Slack message: it needs at least two chunks. Markup must arrive escaped.
ANNOUNCE = "\n".join(
    [
        "Status: success",
        "Result: <!channel> found 3 sources & <b>no</b> conflicts",
        *[f"line {i:04d} {'lorem ipsum ' * 8}" for i in range(600)],
        "runtime 5m12s · tokens 10/20/30 · sessionKey agent:main:subagent:x",
    ]
)


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    fake = slack_fake()
    fake.add_channel(CHANNEL, "general")
    yield from stopped_clean(fake)


@pytest.fixture
def runtime(fake: FakeSlack, tmp_path: Path) -> Iterator[Runtime]:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path / "data"), **fake.iris_env()})
    runtime = Runtime.build(settings)
    runtime.start()
    fake.wait_connected(30)
    yield runtime
    runtime.stop()


def _entries(runtime: Runtime) -> list[dict[str, Any]]:
    """The channel's log, as the engine wrote it."""
    return runtime.engine.sessions.entries(CHANNEL)


def _poster(runtime: Runtime) -> LoggedMessagePoster:
    transport = runtime.engine.transports.owner(CHANNEL)
    assert transport.transport_id == "slack"
    assert isinstance(transport, LoggedMessagePoster)
    return transport


def test_an_announce_lands_in_the_runs_thread_chunked_escaped_and_unlogged(
    fake: FakeSlack, runtime: Runtime
) -> None:
    asked = fake.mention(CHANNEL, "research this in the background")
    wait_until(
        lambda: any(e.get("role") == "assistant" for e in _entries(runtime)), "the run's reply"
    )
    logged = _entries(runtime)
    before = len(replies(fake, CHANNEL, asked))

    ts = _poster(runtime).show_logged_message(CHANNEL, ANNOUNCE, asked)

    shown = replies(fake, CHANNEL, asked)[before:]
    assert len(shown) >= 2  # chunked
    assert shown[0].ts == ts
    assert all(m.thread_ts == asked for m in shown)  # every chunk in the run's thread
    assert "<!channel>" not in "".join(m.text for m in shown)  # no broadcast ping
    assert "&amp;" in shown[0].text and "&lt;b&gt;" in shown[0].text
    assert shown[-1].text.endswith("sessionKey agent:main:subagent:x")
    assert len("\n".join(m.text for m in shown)) >= len(ANNOUNCE)  # nothing lost
    posts = [c for c in fake.calls("chat.postMessage") if c.params.get("thread_ts") == asked]
    assert all(c.params["channel"] == CHANNEL for c in posts)
    # The engine logged the announce; the transport adds nothing to the channel's log.
    assert _entries(runtime) == logged


def test_without_a_thread_it_starts_in_the_channel_and_continues_in_its_own_thread(
    fake: FakeSlack, runtime: Runtime
) -> None:
    ts = _poster(runtime).show_logged_message(CHANNEL, ANNOUNCE, None)
    [first] = [m for m in fake.bot_messages(CHANNEL) if m.ts == ts]
    assert first.thread_ts is None and first.text.startswith("Status: success")
    rest = replies(fake, CHANNEL, ts)
    assert rest and all(m.thread_ts == ts for m in rest if m.ts != ts)
    assert _entries(runtime) == []


def test_an_unknown_channel_is_no_such_channel(runtime: Runtime) -> None:
    with pytest.raises(NoSuchChannel):
        _poster(runtime).show_logged_message("CGONE0001", "Status: error", "1.000001")

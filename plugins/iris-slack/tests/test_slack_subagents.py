"""Session sub-agents on Slack, end to end: a served Iris on the fake Slack and the scripted
provider. A sub-agent spawned from a thread announces in that thread; ``/subagents`` answers
there without a model turn; ``stop`` in the thread stops the sub-agents spawned from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_testkit import log_entries, serve, settled_reply, wait_until, write_rules

from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.server import IrisServer

RULES = [
    {
        "when": "research the moon",
        "turns": [
            [{"tool": "sessions_spawn", "args": {"task": "moon facts child", "label": "moon"}}],
            [{"text": "On it."}],
        ],
    },
    {
        "when": "crawl forever",
        "turns": [
            [{"tool": "sessions_spawn", "args": {"task": "endless crawl child"}}],
            [{"text": "Crawling."}],
        ],
    },
    {"when": "moon facts child", "turns": [[{"text": "the moon is far"}]]},
    {"when": "endless crawl child", "turns": [[{"text": "crawling"}, {"sleep": 60}]]},
    {"when": "Your task has ended", "turns": [[{"text": "Moon report ready"}]]},
]


@pytest.fixture(scope="module")
def iris(base: Path, fake: FakeSlack) -> Iterator[IrisServer]:
    server = serve(base / "data", fake, write_rules(base / "script.json", RULES))
    yield server
    server.stop()


def test_the_announce_lands_in_the_spawning_thread(fake: FakeSlack, iris: IrisServer) -> None:
    fake.add_channel("CMOON0001", "moon")
    ts = fake.mention("CMOON0001", "research the moon")
    messages = settled_reply(fake, "CMOON0001", ts, "Moon report ready")
    [announce] = [m for m in messages if "Moon report ready" in m.current_text]
    assert announce.thread_ts == ts
    assert announce.current_text.startswith('Sub-agent #1 "moon" (agent main) finished.')
    assert "Status: success" in announce.current_text
    assert "Result: Moon report ready" in announce.current_text
    logged = [e for e in log_entries(iris, "CMOON0001") if e.get("announce")]
    assert len(logged) == 1 and logged[0]["text"] == announce.current_text

    fake.mention("CMOON0001", "/subagents list", thread_ts=ts)
    listing = settled_reply(fake, "CMOON0001", ts, "Sub-agents of this chat (1):")
    [line] = [m for m in listing if m.current_text.startswith("Sub-agents of this chat")]
    assert '#1 "moon" · main · success' in line.current_text


def test_stop_in_the_thread_stops_its_sub_agents(fake: FakeSlack, iris: IrisServer) -> None:
    fake.add_channel("CCRAWL001", "crawl")
    ts = fake.mention("CCRAWL001", "crawl forever")
    settled_reply(fake, "CCRAWL001", ts, "Crawling.")
    wait_until(
        lambda: any(
            e.get("text") == "endless crawl child"
            for d in (iris.data_dir).glob("subagent-*")
            for e in log_entries(iris, d.name)
        ),
        "the sub-agent to start",
    )
    fake.mention("CCRAWL001", "stop", thread_ts=ts)
    messages = settled_reply(fake, "CCRAWL001", ts, "Status: error")
    [announce] = [m for m in messages if "Status: error" in m.current_text]
    assert announce.thread_ts == ts
    assert "stopped by a stop request" in announce.current_text

"""``@agent`` on Slack with a real sub-agent runtime: Iris's own model is skipped, the placeholder
shows the sub-agent's status lines, the reply lands in the same thread, and one Slack thread is
one sub-agent conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_testkit import (
    final_reply,
    log_entries,
    serve,
    settled_reply,
    wait_until,
    write_rules,
)

from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.server import IrisServer
from iris_runtime.testing.subagent import SubAgent, SubAgents, register

pytestmark = pytest.mark.slow

HELPER_RULES: list[dict[str, Any]] = [
    {
        "when": "weather",
        "turns": [
            [{"tool": "bash", "args": {"command": "sleep 1.5"}}],
            [{"text": "sunny, 21°C & <dry>"}],
        ],
    },
    {"when": "recap", "turns": [[{"recall": True}]]},
    {"when": "slowjob", "turns": [[{"text": "working on it"}, {"sleep": 60}]]},
    {"when": "anything new", "turns": [[{"text": "[SILENT] nothing since yesterday"}]]},
]


@pytest.fixture(scope="module")
def helper(base: Path) -> Iterator[SubAgent]:
    agents = SubAgents(base)
    yield agents.start("helper", HELPER_RULES)
    agents.stop_all()


@pytest.fixture(scope="module")
def iris(base: Path, fake: FakeSlack, helper: SubAgent) -> Iterator[IrisServer]:
    script = write_rules(base / "iris-script.json", [])
    server = serve(base / "data", fake, script, IRIS_SCRIPT_CALLS_FILE=str(base / "calls.jsonl"))
    register(server, "helper", helper.bridge_url, token=helper.token)
    yield server
    server.stop()


def test_an_agent_mention_goes_straight_to_the_sub_agent(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    ts = fake.mention("CGENERAL1", "@helper what's the weather?")
    [reply] = settled_reply(fake, "CGENERAL1", ts, "sunny")
    assert reply.thread_ts == ts
    assert reply.current_text == "sunny, 21°C &amp; &lt;dry&gt;"  # posted by Iris, escaped
    shown = [edit.text for edit in reply.edits[:-1]]
    assert any("running bash" in text or "asking helper" in text for text in shown)
    assert not (base / "calls.jsonl").exists()  # Iris's own model was never called
    wait_until(lambda: log_entries(iris, "CGENERAL1")[-1].get("role") == "assistant", "the reply")
    entries = log_entries(iris, "CGENERAL1")
    assert [e["type"] for e in entries][-3:] == ["message", "bridge_call", "message"]
    assert entries[-1]["agent"] == "helper" and entries[-1]["text"] == "sunny, 21°C & <dry>"


def test_one_slack_thread_is_one_sub_agent_conversation(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    first = fake.mention("CRANDOM02", "@helper the weather please")
    settled_reply(fake, "CRANDOM02", first, "sunny")
    fake.mention("CRANDOM02", "@helper recap", thread_ts=first)
    replies = settled_reply(fake, "CRANDOM02", first, "recall:")
    assert replies[-1].current_text == "recall: the weather please"
    elsewhere = fake.mention("CRANDOM02", "@helper recap")  # a new thread: a new conversation
    [fresh] = settled_reply(fake, "CRANDOM02", elsewhere, "recall:")
    assert fresh.current_text == "recall:"  # nothing earlier in this conversation
    assert not (base / "calls.jsonl").exists()


def test_an_unknown_agent_falls_through_to_iris(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    ts = fake.mention("CGENERAL1", "@nobody are you there")
    settled_reply(fake, "CGENERAL1", ts, "echo: @nobody are you there")
    assert (base / "calls.jsonl").exists()


def test_stop_reaches_a_delegated_run(base: Path, fake: FakeSlack, iris: IrisServer) -> None:
    fake.add_channel("CAGSTOP01", "agent-stop")
    ts = fake.mention("CAGSTOP01", "@helper slowjob")
    wait_until(
        lambda: any(e["type"] == "bridge_call" for e in log_entries(iris, "CAGSTOP01")),
        "the delegated request",
    )
    fake.mention("CAGSTOP01", "stop", thread_ts=ts)
    messages = final_reply(fake, "CAGSTOP01", ts, "_(stopped)_")
    [note] = [m for m in messages if m.text == "_Stopping._"]
    [placeholder] = [m for m in messages if m.current_text == "_(stopped)_"]
    assert note.at < placeholder.edits[-1].at  # the note answered the stop, before the end
    wait_until(lambda: log_entries(iris, "CAGSTOP01")[-1].get("role") == "assistant", "the end")
    assert log_entries(iris, "CAGSTOP01")[-1]["status"] == "stopped"


def test_a_silent_sub_agent_posts_nothing_and_drops_the_placeholder(
    fake: FakeSlack, iris: IrisServer
) -> None:
    fake.add_channel("CAGQUIET1", "agent-quiet")
    ts = fake.mention("CAGQUIET1", "@helper anything new?")
    [placeholder] = fake.wait_for(
        lambda f: [m for m in f.thread("CAGQUIET1", ts) if m.bot and m.deleted],
        "the placeholder removed",
    )
    wait_until(lambda: log_entries(iris, "CAGQUIET1")[-1].get("role") == "assistant", "the end")
    assert log_entries(iris, "CAGQUIET1")[-1]["text"] == ""
    assert [m for m in fake.bot_messages("CAGQUIET1") if not m.deleted] == []
    assert not any("no reply" in edit.text for edit in placeholder.edits)

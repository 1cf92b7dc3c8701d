"""Channel modes on Slack (channels.json), through a served Iris on the fake Slack with the
scripted provider: every mode's triggers, the thread each reply lands in, one conversation per
thread, admin refusal and commands, passthrough to a real bridge sub-agent and to a custom relay
agent with Iris's model never called, reload on change, and a bad file keeping the previous
configuration."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_testkit import (
    final_reply,
    log_entries,
    replies,
    serve,
    settled_reply,
    slack_fake,
    stopped_clean,
    write_rules,
)

from iris_runtime.engine.transport import ChannelShape
from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.relay_agent import RelayAgent
from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from iris_runtime.testing.subagent import SubAgent, SubAgents, register

pytestmark = pytest.mark.slow

ADMIN = "UADMIN001"
OTHER = "UANA00001"  # the fake's default sender
CHANNELS: dict[str, Any] = {
    "CDMROOM01": {"mode": "dm"},
    "CADMIN001": {"mode": "admin", "admins": [ADMIN]},
    "CTHREAD01": {"mode": "thread"},
    "CINTER001": {"mode": "interactive-thread"},
    "CLEADS001": {"mode": "leads"},
    "CPASSBR01": {"mode": "passthrough", "agent": "helper"},
    "CPASSRL01": {"mode": "passthrough", "agent": "butler"},
}
IRIS_RULES: list[dict[str, Any]] = [
    {"when": "recall", "turns": [[{"recall": True}]]},
    # The passthrough channels' messages: the model would fail the run if it ever saw one.
    {"when": "relay-me", "turns": [[{"error": "Iris's model must not see this"}]]},
]


def write_channels(data_dir: Path, channels: dict[str, Any] | str) -> None:
    """Replace channels.json as an editor or ``iris channels`` would: a new file, renamed."""
    text = channels if isinstance(channels, str) else json.dumps(channels)
    tmp = data_dir / ".channels.json.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, data_dir / "channels.json")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlack]:
    fake = slack_fake()
    for channel in [*CHANNELS, "CPLAIN001"]:
        fake.add_channel(channel, channel.lower())
    fake.add_user(ADMIN, "admin")
    yield from stopped_clean(fake)


@pytest.fixture(scope="module")
def helper(base: Path) -> Iterator[SubAgent]:
    agents = SubAgents(base)
    rules = [
        {"when": "weather", "turns": [[{"text": "sunny"}]]},
        {"when": "again", "turns": [[{"recall": True}]]},
    ]
    yield agents.start("helper", rules)
    agents.stop_all()


@pytest.fixture(scope="module")
def iris(base: Path, fake: FakeSlack, helper: SubAgent) -> Iterator[IrisServer]:
    sockets = Path(tempfile.mkdtemp(prefix="iris-sock-"))
    relay = RelayAgent(free_port(), sockets / "reach.sock", base / "butler.jsonl").start()
    data = base / "data"
    (data / "agents.d").mkdir(parents=True)
    manifest = {"kind": "butler", "label": "Butler", "relay": f"http://127.0.0.1:{relay.port}/"}
    (data / "agents.d" / "butler.json").write_text(json.dumps(manifest))
    write_channels(data, CHANNELS)
    script = write_rules(base / "iris-script.json", IRIS_RULES)
    server = serve(
        data,
        fake,
        script,
        IRIS_SCRIPT_CALLS_FILE=str(base / "calls.jsonl"),
        IRIS_REACH_SOCKET=str(sockets / "reach.sock"),
    )
    # Registered after start: channels.json names it, and is taken once it is known.
    register(server, "helper", helper.bridge_url, token=helper.token)
    yield server
    server.stop()
    relay.stop()
    shutil.rmtree(sockets, ignore_errors=True)


def prompts(base: Path) -> list[str]:
    """The latest user message of every call to Iris's own model."""
    path = base / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line).get("prompt", "") for line in path.read_text().splitlines()]


def top_level_replies(fake: FakeSlack, channel: str) -> list[str]:
    return [m.current_text for m in fake.messages(channel, bot=True) if m.thread_ts is None]


def test_dm_mode_runs_every_message_without_a_mention(fake: FakeSlack, iris: IrisServer) -> None:
    fake.user_message("CDMROOM01", "how are you")
    fake.wait_for(
        lambda f: "echo: how are you" in top_level_replies(f, "CDMROOM01"),
        "a top-level reply in the dm-mode channel",
    )
    ts = fake.user_message("CDMROOM01", "recall what I said")
    fake.wait_for(
        lambda f: "recall: how are you" in top_level_replies(f, "CDMROOM01"),
        "one conversation for the whole channel",
    )
    assert ts and log_entries(iris, "CDMROOM01")[0]["text"] == "how are you"


def test_admin_mode_refuses_others_and_answers_admins(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    chatter = fake.user_message("CADMIN001", "lunch anyone?", user=OTHER)  # not for Iris
    asked = fake.mention("CADMIN001", "restart everything", user=OTHER)
    [refusal] = final_reply(
        fake, "CADMIN001", asked, "Sorry, only this channel's admins can ask me things here."
    )
    assert refusal.thread_ts == asked
    ok = fake.user_message("CADMIN001", "status report", user=ADMIN)
    fake.wait_for(
        lambda f: "echo: status report" in top_level_replies(f, "CADMIN001"), "the admin's reply"
    )
    assert "restart everything" not in prompts(base)  # refused: no run, no model
    assert replies(fake, "CADMIN001", chatter) == []  # chatter gets no refusal
    assert "lunch anyone?" not in prompts(base)
    assert ok and [
        e["text"] for e in log_entries(iris, "CADMIN001") if e.get("role") == "user"
    ] == ["status report"]
    # Admin commands, answered without a model turn.
    fake.user_message("CADMIN001", "/channels", user=ADMIN)
    listing = fake.wait_for(
        lambda f: [t for t in top_level_replies(f, "CADMIN001") if "CTHREAD01: thread" in t],
        "the channel modes",
    )
    assert "CPASSBR01: passthrough to helper" in listing[0]
    fake.user_message("CADMIN001", "/agents", user=ADMIN)
    agents = fake.wait_for(
        lambda f: [t for t in top_level_replies(f, "CADMIN001") if "@helper" in t], "the agents"
    )
    assert "@butler  custom agent Butler" in agents[0]
    fake.user_message("CADMIN001", "/events", user=ADMIN)
    fake.wait_for(lambda f: "No events." in top_level_replies(f, "CADMIN001"), "the events")
    assert not {"/channels", "/agents", "/events"} & set(prompts(base))


def test_thread_mode_is_mention_gated_with_one_conversation_per_thread(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    ignored = fake.user_message("CTHREAD01", "nobody asked iris")
    first = fake.mention("CTHREAD01", "first topic")
    final_reply(fake, "CTHREAD01", first, "echo: first topic")
    second = fake.mention("CTHREAD01", "second topic")
    final_reply(fake, "CTHREAD01", second, "echo: second topic")
    fake.user_message("CTHREAD01", "an unaddressed reply", thread_ts=first)
    fake.mention("CTHREAD01", "recall please", thread_ts=first)
    final_reply(fake, "CTHREAD01", first, "recall: first topic")
    fake.mention("CTHREAD01", "recall please", thread_ts=second)
    final_reply(fake, "CTHREAD01", second, "recall: second topic")
    # A thread's conversation is a channel id like any other: an event addressed to it runs in
    # that conversation and is answered in the thread.
    answer = iris.post(f"/channels/CTHREAD01@{first}/events", json_body={"text": "recall event"})
    assert answer.status == 202 and answer.json()["transport"] == "slack"
    final_reply(fake, "CTHREAD01", first, "recall: first topic | recall please")
    # A malformed thread part is refused, never run headless by the bridge.
    bad = iris.post("/channels/CTHREAD01@abc/events", json_body={"text": "recall event"})
    assert bad.status >= 400, bad.body
    # A file shared in a thread is saved in that thread's conversation, where its run reads.
    shared = fake.add_file("notes.txt", b"thread notes")
    fake.mention("CTHREAD01", "a file", thread_ts=first, files=[shared])
    settled_reply(fake, "CTHREAD01", first, "echo: a file")
    saved = iris.data_dir / f"CTHREAD01@{first}" / "attachments"
    assert [p.name for p in saved.iterdir() if p.name.endswith("notes.txt")], "saved in the thread"
    assert not (iris.data_dir / "CTHREAD01" / "attachments").exists()
    assert replies(fake, "CTHREAD01", ignored) == []
    assert "nobody asked iris" not in prompts(base)
    assert "an unaddressed reply" not in prompts(base)
    assert top_level_replies(fake, "CTHREAD01") == []  # every answer is in its thread
    # Each thread has its own log; the channel's own log keeps the unaddressed messages.
    assert [e["text"] for e in log_entries(iris, f"CTHREAD01@{first}") if e.get("role") == "user"][
        :3
    ] == [
        "first topic",
        "recall please",
        "recall event",
    ]
    logged = [e.get("text") for e in log_entries(iris, "CTHREAD01")]
    assert "nobody asked iris" in logged and "an unaddressed reply" in logged


def test_interactive_thread_follow_ups_need_no_mention(fake: FakeSlack, iris: IrisServer) -> None:
    ignored = fake.user_message("CINTER001", "chatter at top level")
    start = fake.mention("CINTER001", "open a ticket")
    final_reply(fake, "CINTER001", start, "echo: open a ticket")
    fake.user_message("CINTER001", "recall it", thread_ts=start)
    final_reply(fake, "CINTER001", start, "recall: open a ticket")
    assert replies(fake, "CINTER001", ignored) == []


def test_leads_mode_answers_each_top_level_message_in_its_own_thread(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    lead = fake.user_message("CLEADS001", "we need 40 seats")
    [reply] = final_reply(fake, "CLEADS001", lead, "echo: we need 40 seats")
    assert reply.thread_ts == lead
    other = fake.user_message("CLEADS001", "quote for 3 seats")
    final_reply(fake, "CLEADS001", other, "echo: quote for 3 seats")
    fake.user_message("CLEADS001", "a colleague's note", thread_ts=lead)  # thread rules
    fake.mention("CLEADS001", "recall the lead", thread_ts=lead)
    final_reply(fake, "CLEADS001", lead, "recall: we need 40 seats")
    assert "a colleague's note" not in prompts(base)


def test_passthrough_to_a_bridge_sub_agent_skips_iris_model(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    asked = fake.user_message("CPASSBR01", "relay-me the weather")
    [reply] = final_reply(fake, "CPASSBR01", asked, "sunny")
    assert reply.thread_ts == asked
    fake.user_message("CPASSBR01", "relay-me again", thread_ts=asked)
    final_reply(fake, "CPASSBR01", asked, "recall: relay-me the weather")
    assert not [p for p in prompts(base) if "relay-me" in p], "Iris's model was never called"
    assert log_entries(iris, f"CPASSBR01@{asked}")[-1]["agent"] == "helper"
    second = fake.user_message("CPASSBR01", "relay-me again")  # a new thread, a new conversation
    [fresh] = settled_reply(fake, "CPASSBR01", second, "recall:")
    assert "weather" not in fresh.current_text


def test_passthrough_to_a_custom_relay_agent(base: Path, fake: FakeSlack, iris: IrisServer) -> None:
    asked = fake.user_message("CPASSRL01", "echo relay-me hello")
    [reply] = final_reply(fake, "CPASSRL01", asked, "You said: relay-me hello")
    assert reply.thread_ts == asked
    assert not [p for p in prompts(base) if "relay-me" in p]


def test_a_channel_not_listed_keeps_todays_behaviour(fake: FakeSlack, iris: IrisServer) -> None:
    ignored = fake.user_message("CPLAIN001", "just chatting")
    asked = fake.mention("CPLAIN001", "hello")
    final_reply(fake, "CPLAIN001", asked, "echo: hello")
    assert replies(fake, "CPLAIN001", ignored) == []


def test_changes_apply_without_restart_and_a_bad_file_keeps_the_last_good_one(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    write_channels(iris.data_dir, {**CHANNELS, "CPLAIN001": {"mode": "dm"}})
    fake.user_message("CPLAIN001", "now in dm mode")
    fake.wait_for(
        lambda f: "echo: now in dm mode" in top_level_replies(f, "CPLAIN001"), "the new mode"
    )
    write_channels(iris.data_dir, {**CHANNELS, "CPLAIN001": {"mode": "dm", "colour": "red"}})
    fake.user_message("CPLAIN001", "still dm")
    fake.wait_for(lambda f: "echo: still dm" in top_level_replies(f, "CPLAIN001"), "the old mode")
    assert "unknown field(s) 'colour'" in iris.log_tail(100_000)
    listed = iris.get("/channels").json()
    assert listed["channels"]["CPLAIN001"] == {"mode": "dm"}
    assert "unknown field(s) 'colour'" in listed["problem"]
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    doctor = run_iris("doctor", "--json", env=env)
    [check] = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "channels"]
    assert check["status"] == "fail" and "colour" in check["detail"]
    fake.user_message("CADMIN001", "/channels reload", user=ADMIN)
    fake.wait_for(
        lambda f: [t for t in top_level_replies(f, "CADMIN001") if "was not applied" in t],
        "the reload's refusal",
    )
    write_channels(iris.data_dir, CHANNELS)
    fake.user_message("CADMIN001", "/channels reload", user=ADMIN)
    fake.wait_for(
        lambda f: [t for t in top_level_replies(f, "CADMIN001") if "Reloaded" in t],
        "the reload",
    )
    assert iris.get("/channels").json()["problem"] is None
    ignored = fake.user_message("CPLAIN001", "back to mentions only")
    asked = fake.mention("CPLAIN001", "are you there")
    final_reply(fake, "CPLAIN001", asked, "echo: are you there")
    assert replies(fake, "CPLAIN001", ignored) == []
    # In dm mode it would have been answered at top level: check there too.
    assert "echo: back to mentions only" not in top_level_replies(fake, "CPLAIN001")
    assert "back to mentions only" not in prompts(base)


def reach(path: Path, op: str, **fields: Any) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        reply: dict[str, Any] = json.loads(sock.makefile("rb").readline())
        return reply


def test_a_custom_agent_cannot_run_in_an_admin_channel(
    base: Path, fake: FakeSlack, iris: IrisServer
) -> None:
    # Admin rights are checked for every run, not only where Slack receives a message: a
    # custom agent's reach ``run`` (whatever name it gives) never reaches an admin channel.
    sock = Path(iris.env["IRIS_REACH_SOCKET"])
    chats = reach(sock, "chats")["chats"]
    [chat] = [c["chat_id"] for c in chats if c.get("channel") == "CADMIN001"]
    before = len(top_level_replies(fake, "CADMIN001"))
    answer = reach(sock, "run", chat=chat, text="/channels reload", **{"from": ADMIN})
    assert "error" in answer and "admin" in answer["error"], answer
    answer = reach(sock, "run", chat=chat, text="status please")
    assert "error" in answer, answer
    # An event from Iris's API is not an admin either: admin commands refuse it.
    posted = iris.post("/channels/CADMIN001/events", json_body={"text": "/channels reload"})
    assert posted.status == 202, posted.body
    fake.wait_for(
        lambda f: (
            "Sorry, only this channel's admins can ask me things here."
            in top_level_replies(f, "CADMIN001")
        ),
        "the refusal of an admin command from the API",
    )
    fake.user_message("CADMIN001", "/channels", user=ADMIN)  # a real admin still can
    fake.wait_for(lambda f: len(top_level_replies(f, "CADMIN001")) > before, "the admin's command")
    assert not [t for t in top_level_replies(fake, "CADMIN001") if "Reloaded" in t][before:]
    assert "status please" not in prompts(base)


def test_legacy_mention_forms_count() -> None:
    from iris_slack.modes import inbound_of
    from iris_slack.plugin import register_channel_shapes

    event = {"channel": "C0CHAN001", "ts": "1.2", "user": "U1", "text": "<@UBOT00001|iris> hi"}
    assert inbound_of(event, "UBOT00001", mention=False).mentioned
    event["text"] = "<@UBOT000012> hi"  # another user whose id starts with ours
    assert not inbound_of(event, "UBOT00001", mention=False).mentioned
    shapes: list[ChannelShape] = []
    register_channel_shapes(shapes.append)
    [shape] = shapes
    assert shape.claims.fullmatch("C0CHAN001@abc") and shape.claims.fullmatch("C0CHAN001")
    assert shape.is_valid("C0CHAN001@1700000000.000100") and not shape.is_valid("C0CHAN001@abc")

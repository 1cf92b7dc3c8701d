"""The Slack transport end to end: a served Iris (gunicorn) with the plugin installed, talking to
the wire-level fake Slack through the real ``slack_sdk`` (Web API and Socket Mode), with the
scripted provider. Assertions are on the API calls the fake received and on Iris's logs.
"""

from __future__ import annotations

import html
import json
import time
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
    wait_until,
    write_rules,
)

from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.server import IrisServer

pytestmark = pytest.mark.slow

LONG_LINES = [f"{i:05d} {'&<tag> ' * (i % 5)}{'lorem ipsum ' * (i % 17)}" for i in range(1400)]
LONG_REPLY = "\n".join([*LONG_LINES, "END-OF-REPLY"])
MARKUP = "<!here> hi <@UANA00001>, see <https://example.com/a?b=1&c=2|docs> a&b <script>x</script>"
RULES: list[dict[str, Any]] = [
    {"when": "LONGREPLY", "turns": [[{"text": LONG_REPLY}]]},
    {"when": "SLOWRUN", "turns": [[{"text": "partial words"}, {"sleep": 30}, {"text": " never"}]]},
    {
        "when": "MANYTOOLS",
        "turns": [
            [{"tool": "bash", "args": {"command": "sleep 0.1"}, "id": f"t{i}"} for i in range(30)],
            [{"text": "all tools done"}],
        ],
    },
    {"when": "MARKUP", "turns": [[{"text": MARKUP}]]},
    {"when": "QUIET", "turns": [[{"text": "[SILENT] nothing to report"}]]},
    {
        "when": "ATTACHFILE",
        "turns": [
            [{"tool": "write", "args": {"path": "report.txt", "content": "quarterly numbers"}}],
            [{"tool": "attach", "args": {"path": "report.txt", "title": "The report"}}],
            [{"text": "attached the report"}],
        ],
    },
]
MAX_FILE_BYTES = 100_000


@pytest.fixture(scope="module")
def iris(base: Path, fake: FakeSlack) -> Iterator[IrisServer]:
    script = write_rules(base / "script.json", RULES)
    server = serve(
        base / "data",
        fake,
        script,
        IRIS_SCRIPT_CALLS_FILE=str(base / "calls.jsonl"),
        IRIS_SLACK_MAX_FILE_BYTES=str(MAX_FILE_BYTES),
    )
    yield server
    server.stop()


def channel(fake: FakeSlack, channel_id: str) -> str:
    fake.add_channel(channel_id, channel_id.lower())
    return channel_id


def model_prompts(base: Path) -> list[str]:
    path = base / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["prompt"] for line in lines]


def test_start_up_opens_one_socket_mode_connection(fake: FakeSlack, iris: IrisServer) -> None:
    # The SDK's websocket-client adapter opened a second connection while the first was still
    # opening; Slack sent events to the orphan too, and they waited for a redelivery.
    time.sleep(1)  # that happened within half a second of connecting
    assert fake.connections_opened == 1
    assert fake.connected == 1


def test_a_mention_gets_a_placeholder_edited_into_the_reply_in_its_thread(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ts = fake.mention("CGENERAL1", "hello there")
    [reply] = settled_reply(fake, "CGENERAL1", ts, "echo: hello there")
    assert reply.thread_ts == ts  # a new thread under the person's message
    assert reply.text == "_Thinking…_"  # posted at once...
    assert reply.current_text == "echo: hello there"  # ...then edited into the reply
    [post] = [c for c in fake.calls("chat.postMessage") if c.params.get("thread_ts") == ts]
    assert post.params["channel"] == "CGENERAL1"
    assert all(c.params["channel"] == "CGENERAL1" for c in fake.calls("chat.update"))
    wait_until(lambda: len(log_entries(iris, "CGENERAL1")) >= 2, "the reply in the log")
    user, answer = [e for e in log_entries(iris, "CGENERAL1") if e["type"] == "message"][-2:]
    assert (user["role"], user["text"], user["user"]) == ("user", "hello there", "UANA00001")
    assert user["transport"] == "slack"
    assert (answer["role"], answer["text"]) == ("assistant", "echo: hello there")
    assert ts in fake.acks[0] or fake.acks  # envelopes are acknowledged


def test_replies_go_to_the_thread_the_person_wrote_in(fake: FakeSlack, iris: IrisServer) -> None:
    parent = fake.user_message("CRANDOM02", "a topic for later")
    ts = fake.mention("CRANDOM02", "in the thread", thread_ts=parent)
    [reply] = settled_reply(fake, "CRANDOM02", parent, "echo: in the thread")
    assert reply.thread_ts == parent and reply.ts != ts
    assert replies(fake, "CRANDOM02", ts) == []


def test_a_direct_message_starts_a_run_and_chatter_is_only_logged(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ts = fake.dm("just between us")
    [reply] = settled_reply(fake, "DANA00001", ts, "echo: just between us")
    assert reply.thread_ts == ts
    chat = fake.user_message("CGENERAL1", "just chatting, no mention", user="UBEN00002")

    def logged() -> bool:
        return any(e.get("slackTs") == chat for e in log_entries(iris, "CGENERAL1"))

    wait_until(logged, "the chatter in the channel's log")
    [marker] = [e for e in log_entries(iris, "CGENERAL1") if e.get("slackTs") == chat]
    assert marker["type"] == "slack_message" and marker["userName"] == "ben"
    assert "just chatting, no mention" not in " ".join(model_prompts(iris.data_dir.parent))
    assert replies(fake, "CGENERAL1", chat) == []


def test_a_100_kb_reply_is_chunked_on_newlines_into_the_thread(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CLONG0001")
    ts = fake.mention(ch, "LONGREPLY please")
    messages = settled_reply(fake, ch, ts, "END-OF-REPLY")
    assert len(LONG_REPLY) > 100_000
    first, rest = messages[0], messages[1:]
    assert first.text == "_Thinking…_" and first.edits  # chunk 1 replaced the placeholder
    sent = [first.current_text] + [m.text for m in rest]
    assert all(len(text) <= 4000 for text in sent)  # the escaped length is what counts
    assert len(rest) >= len(LONG_REPLY) // 4000
    assert "\n".join(html.unescape(text) for text in sent) == LONG_REPLY
    assert all(m.thread_ts == ts for m in messages)
    assert "&lt;tag&gt;" in sent[0] and "<tag>" not in "".join(sent)


def test_msg_too_long_re_splits_the_chunk_at_half_size(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CLONG0002")
    fake.max_text_length = 2500
    try:
        ts = fake.mention(ch, "LONGREPLY again")
        messages = settled_reply(fake, ch, ts, "END-OF-REPLY")
    finally:
        fake.max_text_length = 40_000
    refused = [c for c in fake.calls("chat.update") if c.params["channel"] == ch and c.error]
    assert refused and refused[0].error == "msg_too_long"
    assert len(refused[0].params["text"]) > 2500
    sent = [messages[0].current_text] + [m.text for m in messages[1:]]
    assert all(len(text) <= 2000 for text in sent)  # re-split at half of 4,000
    assert "\n".join(html.unescape(text) for text in sent) == LONG_REPLY


def test_progress_edits_are_throttled_to_about_one_per_second(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CBUSY0001")
    ts = fake.mention(ch, "MANYTOOLS now")
    [reply] = settled_reply(fake, ch, ts, "all tools done")
    edits = [c for c in fake.calls("chat.update") if c.params.get("ts") == reply.ts and c.ok]
    assert any("running bash" in c.params["text"] for c in edits)  # progress was shown
    assert 2 <= len(edits) < 30  # 30 status lines, far fewer edits
    span = edits[-1].at - edits[0].at
    assert len(edits) - 1 <= span / 1.0 + 1  # at most one edit per second (+1 for jitter)


def test_stop_in_the_thread_aborts_the_run(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CSTOP0001")
    ts = fake.mention(ch, "SLOWRUN until stopped")
    wait_until(
        lambda: any(e.get("text") == "SLOWRUN until stopped" for e in log_entries(iris, ch)),
        "the run to start",
    )
    fake.mention(ch, "stop", thread_ts=ts)
    messages = final_reply(fake, ch, ts, "partial words")
    placeholder = next(m for m in messages if m.text == "_Thinking…_")
    assert placeholder.current_text == "partial words"
    [note] = [m for m in messages if m.text == "_Stopping._"]
    # The note went out before the run's final edit (it answered the stop, not the reply).
    assert note.at < placeholder.edits[-1].at
    wait_until(lambda: log_entries(iris, ch)[-1].get("role") == "assistant", "the logged reply")
    assert log_entries(iris, ch)[-1]["status"] == "stopped"
    fake.mention(ch, "stop", thread_ts=ts)
    settled_reply(fake, ch, ts, "Nothing is running")


def test_a_channel_addressed_api_event_reaches_the_slack_transport(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CEVENT001")
    answer = iris.post(f"/channels/{ch}/events", json_body={"text": "api ping"})
    assert answer.status == 202 and answer.json()["transport"] == "slack"
    [posted] = fake.wait_for(
        lambda f: [m for m in f.bot_messages(ch) if "echo: api ping" in m.current_text],
        "the event's reply",
    )
    assert posted.thread_ts is None  # an event has no thread: it is posted in the channel
    assert posted.text == "echo: api ping"  # no placeholder, no edits
    assert not posted.edits


def test_an_escalation_reaches_slack_and_one_to_no_such_channel_is_404(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CESCAL001")
    posted = iris.post("/escalate", json_body={"text": "disk full", "channel": ch})
    assert posted.status == 202 and posted.json()["transport"] == "slack", posted.body
    assert [m.text for m in fake.bot_messages(ch)] == ["⚠ Escalation from iris (error): disk full"]
    unknown = iris.post("/escalate", json_body={"text": "x", "channel": "CNOSUCH99"})
    assert unknown.status == 404, unknown.body
    assert unknown.json()["code"] == "no_such_channel"
    assert "slack" in unknown.json()["error"] and "channel_not_found" in unknown.json()["error"]
    assert not (iris.data_dir / "CNOSUCH99" / "log.jsonl").exists()


def test_silent_replies_post_nothing_and_drop_the_placeholder(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CQUIET001")
    assert iris.post(f"/channels/{ch}/events", json_body={"text": "QUIET check"}).status == 202
    ts = fake.mention(ch, "QUIET please")
    [placeholder] = fake.wait_for(
        lambda f: [m for m in f.thread(ch, ts) if m.bot and m.deleted], "the placeholder removed"
    )
    assert not placeholder.edits
    wait_until(
        lambda: len([e for e in log_entries(iris, ch) if e.get("role") == "assistant"]) == 2,
        "both silent replies in the log",
    )
    assert [m for m in fake.bot_messages(ch) if not m.deleted] == []


def test_a_scheduled_event_in_slack_events_reaches_the_slack_transport(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CEVENT002")
    folder = iris.data_dir / "slack" / "events"
    folder.mkdir(parents=True, exist_ok=True)
    event = {"type": "immediate", "channelId": ch, "text": "scheduled ping"}
    (folder / "ping.json.tmp").write_text(json.dumps(event))
    (folder / "ping.json.tmp").rename(folder / "ping.json")
    [posted] = fake.wait_for(
        lambda f: [m for m in f.bot_messages(ch) if "scheduled ping" in m.current_text],
        "the scheduled event's reply",
    )
    assert posted.text.startswith("echo: [EVENT:slack/events/ping.json:immediate:")
    wait_until(lambda: not (folder / "ping.json").exists(), "the event file to be consumed")
    # slack/events/ only serves Slack channels: another transport's channel is refused.
    (folder / "wrong.json").write_text(json.dumps({**event, "channelId": "SESSION-x"}))
    wait_until(lambda: (folder / "wrong.json.error").exists(), "the refusal")
    assert "bridge" in (folder / "wrong.json.error").read_text()


def test_markup_injection_is_escaped_both_ways(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CMARK0001")
    ts = fake.mention(ch, "MARKUP please")
    [reply] = settled_reply(fake, ch, ts, "|docs>")
    text = reply.current_text
    assert "<!here>" not in text and "&lt;!here&gt;" in text
    assert "<@UANA00001>" in text  # a deliberate mention survives
    assert "<https://example.com/a?b=1&amp;c=2|docs>" in text
    assert "a&amp;b &lt;script&gt;x&lt;/script&gt;" in text
    # A person's broadcasts echoed back (Slack sends <!channel> for a real @channel, and
    # &lt;!here&gt; for the typed text): never a broadcast from Iris.
    ts = fake.mention(ch, "<!channel> &lt;!here&gt; <!subteam^S1|@admins> &amp;lt;")
    [echo] = settled_reply(fake, ch, ts, "echo:")
    assert "<!" not in echo.current_text
    assert echo.current_text == (
        "echo: &lt;!channel&gt; &lt;!here&gt; &lt;!subteam^S1|@admins&gt; &amp;lt;"
    )


def test_an_empty_mention_gets_a_hint_and_no_run(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CEMPTY001")
    before = len(model_prompts(iris.data_dir.parent))
    ts = fake.mention(ch, "   ")
    [hint] = settled_reply(fake, ch, ts, "Mention me with a question")
    assert not hint.edits
    assert len(model_prompts(iris.data_dir.parent)) == before
    assert [e["type"] for e in log_entries(iris, ch)] == ["slack_message"]


@pytest.mark.parametrize(
    ("ch", "error"), [("CGHOST0001", "channel_not_found"), ("CLEFT0003", "not_in_channel")]
)
def test_a_channel_the_bot_cannot_post_in_keeps_the_reply_in_the_log(
    fake: FakeSlack, iris: IrisServer, ch: str, error: str
) -> None:
    fake.mention(ch, "are you there", user="UNOBODY99")  # an unknown person, too
    wait_until(
        lambda: any(e.get("role") == "assistant" for e in log_entries(iris, ch)), "the reply"
    )
    user, answer = [e for e in log_entries(iris, ch) if e["type"] == "message"]
    assert user["user"] == "UNOBODY99" and answer["text"] == "echo: are you there"
    posts = [c for c in fake.calls("chat.postMessage") if c.params.get("channel") == ch]
    assert posts and all(c.error == error for c in posts)
    assert len(posts) <= 2  # the placeholder and the reply: no retry storm on a final error
    assert any(c.params.get("user") == "UNOBODY99" for c in fake.calls("users.info"))


def test_shared_files_are_saved_with_safe_names(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CFILES001")
    hostile = fake.add_file("../../etc/passwd", b"root:x:0:0")
    hidden = fake.add_file(".env", b"SECRET=1")
    weird = fake.add_file("a\x00b\nc<>.txt", "ünïcode ✓".encode())
    large = fake.add_file("big.bin", b"x" * (MAX_FILE_BYTES + 1))
    foreign = {**fake.add_file("elsewhere.txt", b"nope"), "size": 4}
    foreign["url_private_download"] = "https://evil.example/steal"
    ts = fake.mention(ch, "look at these", files=[hostile, hidden, weird, large, foreign])
    [reply] = settled_reply(fake, ch, ts, "echo: look at these")
    folder = iris.data_dir / ch / "attachments"
    saved = sorted(p.name for p in folder.iterdir())
    assert len(saved) == 3
    assert all(".." not in name and "/" not in name for name in saved)
    assert not any(name.startswith(".") for name in saved)
    contents = {p.read_bytes() for p in folder.iterdir()}
    assert contents == {b"root:x:0:0", b"SECRET=1", "ünïcode ✓".encode()}
    assert not (iris.data_dir / "etc").exists()
    assert all((folder / name).stat().st_mode & 0o777 == 0o600 for name in saved)
    assert "big.bin was not saved: file_too_large" in html.unescape(reply.current_text)
    assert "was not saved: untrusted_file_url" in reply.current_text
    assert "slack_attachments" in html.unescape(reply.current_text)
    assert set(fake.downloads) == {hostile["id"], hidden["id"], weird["id"]}
    [user] = [e for e in log_entries(iris, ch) if e.get("role") == "user"]
    assert sorted(Path(a).name for a in user["attachments"]) == saved


def test_the_attach_tool_uploads_into_the_thread(fake: FakeSlack, iris: IrisServer) -> None:
    ch = channel(fake, "CATTACH01")
    ts = fake.mention(ch, "ATTACHFILE now")
    settled_reply(fake, ch, ts, "attached the report")
    [uploaded] = fake.uploaded_files()
    assert (uploaded.name, uploaded.content, uploaded.title) == (
        "report.txt",
        b"quarterly numbers",
        "The report",
    )
    [complete] = fake.calls("files.completeUploadExternal")
    assert (complete.params["channel_id"], complete.params["thread_ts"]) == (ch, ts)
    shared = [m for m in fake.thread(ch, ts) if m.files]
    assert shared and shared[0].files[0]["id"] == uploaded.id


def test_a_channel_queues_five_messages_and_refuses_the_sixth(
    fake: FakeSlack, iris: IrisServer
) -> None:
    ch = channel(fake, "CQUEUE001")
    first = fake.mention(ch, "SLOWRUN holds the channel")
    wait_until(
        lambda: any(e.get("text") == "SLOWRUN holds the channel" for e in log_entries(iris, ch)),
        "the first run to start",
    )
    waiting = [fake.mention(ch, f"queued {i}") for i in range(6)]
    [busy] = settled_reply(fake, ch, waiting[5], "I'm busy in this channel")
    for ts in waiting[:5]:
        settled_reply(fake, ch, ts, "Queued")
    fake.mention(ch, "stop", thread_ts=first)
    for i, ts in enumerate(waiting[:5]):
        [reply] = settled_reply(fake, ch, ts, f"echo: queued {i}")
        assert reply.text.startswith("_Queued")  # the queued placeholder became the reply
    assert not busy.edits or "busy" in busy.current_text
    refused = [e for e in log_entries(iris, ch) if e.get("slackTs") == waiting[5]]
    assert refused and refused[0]["type"] == "slack_message"  # logged, never run


def test_tokens_never_reach_the_log_or_the_command_line(fake: FakeSlack, iris: IrisServer) -> None:
    assert iris.process is not None and iris.log_path is not None
    cmdline = Path(f"/proc/{iris.process.pid}/cmdline").read_bytes().decode(errors="replace")
    logged = iris.log_path.read_text(errors="replace")
    assert "slack: connected over Socket Mode" in logged
    for token in (fake.bot_token, fake.app_token):
        assert token not in logged and token not in cmdline

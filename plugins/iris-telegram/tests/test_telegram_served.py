"""Telegram end to end: a served Iris (gunicorn, the plugin installed) polling the fake Bot API
with the real client code, on the scripted provider. Every assertion is on what the fake
received: messages, edits, thread ids, reply anchors, chunk sizes, entities, documents.

The tests here share one served Iris and one fake (each test uses chats of its own)."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from iris_telegram.markup import html_chunks, parse, render
from telegram_harness import ALLOWED_CHAT, TelegramIris, new_chat

from iris_runtime.testing.fake_telegram import MESSAGE_LIMIT, parse_html, utf16_len

pytestmark = pytest.mark.slow


@pytest.fixture
def iris(shared_telegram_iris: TelegramIris) -> TelegramIris:
    shared_telegram_iris.rules([])
    return shared_telegram_iris


def sent_prompts(iris: TelegramIris) -> list[str]:
    return [c["prompt"] for c in iris.provider_calls() if c["turn"] == 0]


def test_placeholder_progress_and_final_reply_in_the_topic(iris: TelegramIris) -> None:
    iris.rules(
        [
            {
                "when": "check the disk",
                "turns": [
                    [{"text": "Looking."}, {"tool": "no_such_tool"}],
                    [{"text": "All **good**."}],
                ],
            }
        ]
    )
    chat = -new_chat()
    asked = iris.fake.user_says(chat, "check the disk please", thread_id=77)
    message_id = asked["message"]["message_id"]

    reply = iris.wait_reply(chat, message_id, "Looking.\n\nAll good.")
    assert reply.history[0] == "Thinking…" and reply.history[-1] == "Looking.\n\nAll good."
    # Edits are at most one a second per chat: on a loaded machine the status line can be
    # superseded by the final text before its turn comes, and is then never sent.
    assert reply.history[1:-1] in ([], ["→ running no_such_tool"])
    assert reply.thread_id == 77  # the placeholder went to the topic and stayed there
    assert reply.entities == [{"type": "bold", "offset": 14, "length": 4}]
    assert [m.message_id for m in iris.fake.bot_messages(chat)] == [reply.message_id]
    [placeholder] = [c for c in iris.fake.calls_of("sendMessage") if c.params["chat_id"] == chat]
    assert placeholder.params["message_thread_id"] == 77
    assert placeholder.params["reply_parameters"]["message_id"] == message_id
    edits = [c for c in iris.fake.calls_of("editMessageText") if c.params["chat_id"] == chat]
    assert [c.params["parse_mode"] for c in edits] == ["HTML"] * (len(reply.history) - 1)


def test_a_100_kb_reply_is_chunked_under_the_limit(iris: TelegramIris) -> None:
    paragraphs = [
        f"**Part {i}.** " + " ".join(f"word{j} <x> & `c{j}`" for j in range(60)) for i in range(240)
    ]
    book = "\n\n".join(paragraphs)
    assert len(book) > 100_000
    iris.rules([{"when": "write a book", "turns": [[{"text": book}]]}])
    chat = new_chat()
    asked = iris.fake.user_says(chat, "write a book")["message"]["message_id"]

    expected = [parse_html(chunk).text for chunk in html_chunks(book)]
    messages = iris.wait(
        lambda f: (ms := f.bot_messages(chat)) and len(ms) == len(expected) and ms,
        f"{len(expected)} messages",
    )
    first = iris.wait_reply(chat, asked, expected[0])
    assert first.message_id == messages[0].message_id and first.history[0] == "Thinking…"
    assert [m.text for m in messages] == expected
    assert all(utf16_len(m.text) <= MESSAGE_LIMIT for m in messages)
    assert all(m.reply_to is None for m in messages[1:])
    whole = parse_html(render(parse(book))).text
    assert "".join(m.text for m in messages).replace("\n", "") == whole.replace("\n", "")


def test_formatting_and_escaping_as_telegram_parses_them(iris: TelegramIris) -> None:
    iris.rules(
        [
            {
                "when": "format it",
                "turns": [
                    [
                        {
                            "text": "**Done**: see [the docs](https://docs.example/a?b=1&c=2), "
                            "[report.pdf](report.pdf) and `<b>code</b>`. <i>not html</i> & co."
                        }
                    ]
                ],
            }
        ]
    )
    chat = new_chat()
    asked = iris.fake.user_says(chat, "format it")["message"]["message_id"]
    text = "Done: see the docs, report.pdf and <b>code</b>. <i>not html</i> & co."
    reply = iris.wait_reply(chat, asked, text)
    assert reply.entities == [
        {"type": "bold", "offset": 0, "length": 4},
        {"type": "text_link", "offset": 10, "length": 8, "url": "https://docs.example/a?b=1&c=2"},
        {"type": "code", "offset": 35, "length": 11},
    ]
    # A user's markup comes back as text too (the scripted model echoes unknown messages).
    attack = '<b>hi</b> <a href="https://evil.example">x</a> [y](javascript:alert(1)) &amp;'
    asked = iris.fake.user_says(chat, attack)["message"]["message_id"]
    echoed = iris.wait_reply(
        chat, asked, f"echo: {attack}".replace("[y](javascript:alert(1))", "y")
    )
    assert echoed.entities == []


def test_edits_stay_within_the_throttle_under_a_burst(iris: TelegramIris) -> None:
    steps = [[{"sleep": 0.1}, {"tool": f"no_such_tool_{i}"}] for i in range(30)]
    iris.rules([{"when": "burst", "turns": [*steps, [{"text": "burst done"}]]}])
    chat = new_chat()
    asked = iris.fake.user_says(chat, "burst of progress")["message"]["message_id"]
    reply = iris.wait_reply(chat, asked, "burst done", timeout=60)

    times = [e.at for e in reply.edits]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(reply.edits) >= 3, "progress was shown while the run went on"
    assert len(reply.edits) < 30, "status lines that came too fast were coalesced"
    assert min(gaps) >= 0.5, gaps  # the throttle allows one edit per second per chat
    assert all(t.startswith("→ running no_such_tool_") for t in reply.history[1:-1])


def test_stop_aborts_the_run_and_keeps_what_it_said(iris: TelegramIris) -> None:
    iris.rules(
        [
            {"when": "long story", "turns": [[{"text": "partial answer"}, {"sleep": 120}]]},
            {"when": "long silence", "turns": [[{"sleep": 120}]]},
        ]
    )
    chat = new_chat()
    asked = iris.fake.user_says(chat, "tell a long story")["message"]["message_id"]
    iris.wait(lambda f: "tell a long story" in sent_prompts(iris), "the model to be asked")
    time.sleep(0.5)  # let it say its first words (a stop before them leaves nothing to keep)
    stop = iris.fake.user_says(chat, "/stop")["message"]["message_id"]
    assert iris.wait_reply(chat, stop).text == "Stopping."
    assert (
        iris.wait_reply(chat, asked, "partial answer", timeout=60).history[-1] == "partial answer"
    )

    asked = iris.fake.user_says(chat, "a long silence")["message"]["message_id"]
    iris.wait_reply(chat, asked, "Thinking…")
    iris.fake.user_says(chat, "/stop@iris_test_bot")
    iris.wait_reply(chat, asked, "(stopped)", timeout=60)

    log = iris.server.data_dir / f"tg-{chat}" / "log.jsonl"
    statuses = iris.wait(
        lambda f: (
            (s := [json.loads(x).get("status") for x in log.read_text().splitlines()])
            and s.count("stopped") == 2
            and s
        ),
        "both runs logged as stopped",
    )
    assert statuses.count("stopped") == 2
    quiet = new_chat()
    idle = iris.fake.user_says(quiet, "/stop")["message"]["message_id"]
    assert iris.wait_reply(quiet, idle).text == "Nothing is running here."


def test_five_messages_wait_and_the_sixth_is_refused(iris: TelegramIris) -> None:
    iris.rules([{"when": "hold the line", "turns": [[{"sleep": 120}]]}])
    chat = new_chat()
    first = iris.fake.user_says(chat, "hold the line")["message"]["message_id"]
    iris.wait_reply(chat, first, "Thinking…")
    waiting = [iris.fake.user_says(chat, f"quick {i}")["message"]["message_id"] for i in range(6)]
    refused = iris.wait_reply(chat, waiting[5], prefix="I am still busy")
    assert "5 messages are already waiting" in refused.text
    assert len(refused.history) == 1  # refused at once: no "Queued…" posted first
    assert [iris.replies(chat, m)[0].text for m in waiting[:5]] == ["Queued…"] * 5
    iris.fake.user_says(chat, "/stop")
    for index, message_id in enumerate(waiting[:5]):
        reply = iris.wait_reply(chat, message_id, f"echo: quick {index}")
        assert reply.history[0] == "Queued…"
    assert [len(iris.replies(chat, m)) for m in waiting] == [1, 1, 1, 1, 1, 1]
    assert "quick 5" not in sent_prompts(iris)


def test_an_api_event_for_a_tg_channel_reaches_telegram(iris: TelegramIris) -> None:
    chat = new_chat()
    iris.fake.chat(chat)  # a chat the bot is in, where nobody spoke since start-up
    answer = iris.server.post(f"/channels/tg-{chat}/events", json_body={"text": "ping from api"})
    assert answer.status == 202, answer.body
    assert answer.json() == {"accepted": True, "transport": "telegram"}
    [message] = iris.wait(lambda f: f.bot_messages(chat), "the event's reply")
    assert message.text == "echo: ping from api"
    assert message.history == ["echo: ping from api"]  # no placeholder for an event
    assert message.reply_to is None
    # A tg- id that is no Telegram chat id is refused, never handed to the bridge catch-all.
    for channel in ("tg-notachat", "tg-ops"):
        other = iris.server.post(f"/channels/{channel}/events", json_body={"text": "x"})
        assert other.status == 404, other.body
        assert other.json()["code"] == "no_such_channel"
        assert "telegram" in other.json()["error"] and "integer" in other.json()["error"]
        assert not (iris.server.data_dir / channel).exists()


def test_an_escalation_reaches_a_telegram_chat_and_a_wrong_one_is_refused(
    iris: TelegramIris,
) -> None:
    chat = new_chat()
    iris.fake.chat(chat)
    posted = iris.server.post("/escalate", json_body={"text": "disk full", "channel": f"tg-{chat}"})
    assert posted.status == 202, posted.body
    assert posted.json()["transport"] == "telegram"
    [message] = iris.wait(lambda f: f.bot_messages(chat), "the escalation")
    assert message.text == "⚠ Escalation from iris (error): disk full"
    malformed = iris.server.post("/escalate", json_body={"text": "x", "channel": "tg-ops"})
    assert malformed.status == 404 and malformed.json()["code"] == "no_such_channel"
    assert "telegram" in malformed.json()["error"]
    unknown = iris.server.post("/escalate", json_body={"text": "x", "channel": f"tg-{new_chat()}"})
    assert unknown.status == 404, unknown.body
    assert unknown.json()["code"] == "no_such_channel"
    assert "chat not found" in unknown.json()["error"]


def test_a_scheduled_event_file_reaches_telegram(iris: TelegramIris) -> None:
    chat = new_chat()
    iris.fake.chat(chat)
    folder = iris.server.data_dir / "telegram" / "events"
    folder.mkdir(parents=True, exist_ok=True)
    body = {"type": "immediate", "channelId": f"tg-{chat}", "text": "scheduled ping"}
    (folder / ".ping.json.tmp").write_text(json.dumps(body))
    (folder / ".ping.json.tmp").rename(folder / f"ping-{chat}.json")
    [message] = iris.wait(lambda f: f.bot_messages(chat), "the scheduled event's reply")
    assert message.text.startswith(f"echo: [EVENT:telegram/events/ping-{chat}.json:immediate:")
    assert message.text.endswith("] scheduled ping")
    # A file in telegram/events/ for a channel this transport does not own is refused.
    wrong = folder / "wrong.json"
    wrong.write_text(json.dumps({**body, "channelId": "SESSION-x"}))
    reason = folder / "wrong.json.error"
    iris.wait(lambda f: reason.exists(), "the .error file")
    assert "belongs to the bridge transport, not telegram" in reason.read_text()


def test_bad_input_is_ignored_or_survived(iris: TelegramIris) -> None:
    chat = new_chat()
    iris.fake.user_says(chat, "")
    iris.fake.user_says(chat, "  \n ")
    iris.fake.user_says(chat, None, extra={"sticker": {"file_id": "x"}})
    template = iris.fake.user_says(chat, "edited later")["message"]
    for update in (
        {"edited_message": {**template, "text": "edited"}},
        {"message_reaction": {"chat": {"id": chat}}},
        {"a_type_from_the_future": {"anything": [1, {"x": None}]}},
        {"message": "not an object"},
        {"message": {"message_id": 1, "chat": "nope", "text": "x"}},
    ):
        iris.fake.push_update(update)
    # No user id (a channel, an anonymous admin): accepted only in an allowed chat.
    anonymous = iris.fake.user_says(ALLOWED_CHAT, "who am I", user_id=None)["message"]
    last = iris.fake.user_says(chat, "after the noise")["message"]["message_id"]
    iris.wait_reply(chat, last, "echo: after the noise")
    iris.wait_reply(ALLOWED_CHAT, anonymous["message_id"], "echo: who am I")
    replied = [m.reply_to or 0 for m in iris.fake.bot_messages(chat)]
    assert sorted(replied) == sorted([template["message_id"], last])
    assert "Traceback" not in iris.log()


def test_an_event_for_an_unknown_chat_is_logged_and_harmless(iris: TelegramIris) -> None:
    ghost = 987654321987
    answer = iris.server.post(f"/channels/tg-{ghost}/events", json_body={"text": "anyone?"})
    assert answer.status == 202
    log_path = iris.server.data_dir / f"tg-{ghost}" / "log.jsonl"
    iris.wait(
        lambda f: "could not deliver the reply in tg-" in iris.log() and log_path.exists(),
        "the delivery error",
    )
    assert "chat not found" in iris.log()
    replies = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert replies[-1]["role"] == "assistant" and replies[-1]["text"] == "echo: anyone?"
    chat = new_chat()  # and Iris carries on
    asked = iris.fake.user_says(chat, "still there?")["message"]["message_id"]
    iris.wait_reply(chat, asked, "echo: still there?")


def test_photos_and_documents_are_saved_in_the_channel_folder(iris: TelegramIris) -> None:
    chat = new_chat()
    photo = iris.fake.user_sends_photo(chat, b"\x89PNG" + b"p" * 5000, caption="what is this?")
    photo_id = photo["message"]["message_id"]
    iris.wait_reply(chat, photo_id, prefix="echo: what is this?")
    folder = iris.server.data_dir / f"tg-{chat}" / "attachments"
    assert (folder / f"{photo_id}_photo.jpg").read_bytes() == b"\x89PNG" + b"p" * 5000
    [prompt] = [p for p in sent_prompts(iris) if p.startswith("what is this?")]
    assert f"<telegram_attachments>\n{folder.resolve() / f'{photo_id}_photo.jpg'}" in prompt

    hostile = {
        "../../../../escape.txt": "escape.txt",
        "..": "document",
        "evil\u202egnp.exe": "evil_gnp.exe",
        ".hidden": "hidden",
        "x" * 300 + ".txt": "x" * 116 + ".txt",
    }
    ids = {}
    for name in hostile:
        sent = iris.fake.user_sends_document(chat, name.encode()[:50], name, caption="file")
        ids[name] = sent["message"]["message_id"]
    big = iris.fake.user_says(
        chat,
        None,
        extra={
            "caption": "huge",
            "document": {"file_id": "nope", "file_name": "big.bin", "file_size": 30 << 20},
        },
    )["message"]["message_id"]
    iris.wait_reply(chat, big, prefix="echo: huge")
    for name, safe in hostile.items():
        iris.wait_reply(chat, ids[name], prefix="echo: file")
        assert (folder / f"{ids[name]}_{safe}").read_bytes() == name.encode()[:50]
    assert not (iris.server.data_dir.parent / "escape.txt").exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{photo_id}_photo.jpg", *(f"{ids[n]}_{s}" for n, s in hostile.items())]
    )
    [huge] = [p for p in sent_prompts(iris) if p.startswith("huge")]
    assert "(the attached file big.bin could not be downloaded: it is larger than 20 MB)" in huge


def test_the_attach_tool_sends_a_document(iris: TelegramIris) -> None:
    (iris.server.data_dir / "report.txt").write_text("quarterly numbers\n")
    iris.rules(
        [
            {
                "when": "send me the report",
                "turns": [
                    [{"tool": "attach", "args": {"path": "report.txt", "title": "Q3 <final>"}}],
                    [{"text": "Sent."}],
                ],
            }
        ]
    )
    chat = -new_chat()
    asked = iris.fake.user_says(chat, "send me the report", thread_id=3)["message"]["message_id"]
    iris.wait_reply(chat, asked, "Sent.")
    [document] = [m for m in iris.fake.bot_messages(chat) if m.document is not None]
    assert document.document is not None
    assert (document.document.filename, document.document.content) == (
        "report.txt",
        b"quarterly numbers\n",
    )
    assert document.text == "Q3 <final>" and document.thread_id == 3


def test_silent_replies_leave_nothing_in_the_chat(iris: TelegramIris) -> None:
    iris.rules([{"when": "nothing to add", "turns": [[{"text": "[SILENT] all quiet"}]]}])
    chat = new_chat()
    asked = iris.fake.user_says(chat, "nothing to add")["message"]["message_id"]
    iris.wait(
        lambda f: (ms := f.bot_messages(chat, include_deleted=True)) and ms[0].deleted,
        "the placeholder to be deleted",
    )
    assert iris.fake.bot_messages(chat) == []
    answer = iris.server.post(f"/channels/tg-{chat}/events", json_body={"text": "nothing to add"})
    assert answer.status == 202
    later = iris.fake.user_says(chat, "and now?")["message"]["message_id"]
    iris.wait_reply(chat, later, "echo: and now?")
    assert [m.reply_to for m in iris.fake.bot_messages(chat)] == [later]
    assert asked not in [m.reply_to for m in iris.fake.bot_messages(chat)]


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ("![](chart.png)", "chart.png"),
        ("[](notes.txt)", "notes.txt"),
        ("```\n```", "(no reply)"),
        ("> ", "(no reply)"),
    ],
)
def test_a_reply_that_renders_to_nothing_still_replaces_the_placeholder(
    iris: TelegramIris, reply: str, shown: str
) -> None:
    iris.rules([{"when": "draw it", "turns": [[{"text": reply}]]}])
    chat = new_chat()
    asked = iris.fake.user_says(chat, "draw it")["message"]["message_id"]
    final = iris.wait_reply(chat, asked, shown)
    assert final.history[0] == "Thinking…"

"""Background sub-agents in a served Iris with the Web UI: ``Engine.notify`` becomes a
``subagent`` frame on the conversation's sockets and a card in its history; an announce the
engine logged is shown live once (``show_logged_message``) and comes back from the history as
the same message, never as a run's reply with an error.

The engine's side is reached through the test-only hook plugin (``notify_hook``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from notify_hook import announce, notify, notify_env, subagent_event
from server_harness import Socket, WebIris, served_handmade_log

ANNOUNCE = "**Status**: success\n**Result**: three sources agree\n\nruntime 5m12s"


def frames_until(sock: Socket, kind: str) -> dict[str, Any]:
    return sock.until(lambda f: f.get("type") == kind)[-1]


def log_of(data_dir: Path, session: str) -> list[dict[str, Any]]:
    text = (data_dir / f"WEBUI-{session}" / "log.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def test_events_become_frames_and_cards_and_an_announce_is_shown_once(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    data_dir = tmp_path / "iris-data"
    web = start_web_iris(
        [{"when": "research", "turns": [[{"text": "Started a sub-agent."}]]}],
        data_dir=data_dir,
        **notify_env(),
    )
    http = web.login()
    session = web.new_session(http)
    channel = f"WEBUI-{session}"
    sock = web.connect(http, session)
    assert sock.recv()["type"] == "ready"
    sock.send({"type": "message", "text": "research the sources"})
    sock.final()

    spawned = subagent_event("spawned", "queued", future_field={"x": 1}, label=7)
    notify(web.server, channel, {"type": "something_else", "runId": "ignored"})
    notify(web.server, channel, subagent_event("spawned", "queued", runId=None))  # no run id
    notify(web.server, channel, spawned)
    frame = frames_until(sock, "subagent")
    assert frame["runId"] == "run-1"  # the two before it were ignored
    server_time = frame.pop("serverTime")
    assert isinstance(server_time, float)
    assert frame == {
        "type": "subagent",
        "runId": "run-1",
        "phase": "spawned",
        "status": "queued",
        "sessionKey": "agent:main:subagent:0b5e",
        "sessionId": "subagent-0b5e",
        "agentId": "main",
        "index": 1,
        "createdAt": spawned["createdAt"],
        "startedAt": None,
        "endedAt": None,
        "runtimeSeconds": None,
    }  # the unknown field and the label of the wrong type are gone

    started = spawned["createdAt"] + 1
    notify(web.server, channel, subagent_event("started", "running", startedAt=started))
    assert frames_until(sock, "subagent")["status"] == "running"
    times = {"startedAt": started, "endedAt": started + 312, "runtimeSeconds": 312}
    notify(web.server, channel, subagent_event("finished", "success", **times))
    assert frames_until(sock, "subagent")["runtimeSeconds"] == 312

    message_id = announce(web.server, channel, ANNOUNCE, key="announce-run-1")
    post = frames_until(sock, "post")
    assert post == {
        "type": "post",
        "text": ANNOUNCE,
        "posted": True,
        "id": "logged-announce-run-1",
        "agent": "subagent:main",
    }
    assert message_id == "logged-announce-run-1"
    notify(web.server, channel, subagent_event("archived", "success", **times))
    assert frames_until(sock, "subagent")["phase"] == "archived"

    # The log holds the engine's one entry for the announce (no webui_post of ours) and a
    # marker per step.
    entries = log_of(data_dir, session)
    [logged] = [e for e in entries if e.get("text") == ANNOUNCE]
    assert (logged["role"], logged["announce"], logged["posted"], logged["agent"]) == (
        "assistant",
        "announce-run-1",
        True,
        "subagent:main",
    )
    assert not [e for e in entries if e.get("type") == "webui_post"]
    assert [e["card"]["phase"] for e in entries if e.get("type") == "webui_subagent"] == [
        "spawned",
        "started",
        "finished",
        "archived",
    ]

    # The history: the run, one card (its last state), the announce as it was shown.
    messages = web.history(http, session)
    assert [m["role"] for m in messages] == ["user", "assistant", "subagent", "assistant"]
    card = messages[2]["card"]
    assert (card["phase"], card["status"], card["runtimeSeconds"]) == ("archived", "success", 312)
    assert card["startedAt"] == started and card["index"] == 1
    shown = messages[3]
    assert (shown["id"], shown["text"], shown["agent"], shown["posted"]) == (
        message_id,
        ANNOUNCE,
        "subagent:main",
        True,
    )
    assert "status" not in shown  # not a run's reply: no "ended with an error" note


def test_history_places_cards_after_their_runs_reply_and_survives_a_hostile_log(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    tool = {"id": "c1", "name": "sessions_spawn", "title": "sessions_spawn", "result": "ok"}
    spawn = {"runId": "r1", "phase": "spawned", "status": "queued", "index": 1, "label": "one"}
    entries: list[object] = [
        {"type": "message", "role": "user", "text": "spawn two", "ts": "1"},
        # Logged during the run: the card goes after the run's reply.
        {"type": "webui_subagent", "card": spawn},
        {"type": "webui_subagent", "card": {"runId": "r2", "index": True, "startedAt": "x"}},
        {"type": "webui_subagent", "card": {"phase": "spawned"}},  # no run id: ignored
        {"type": "webui_subagent", "card": "not a card"},
        {"type": "webui_subagent", "card": {"runId": ["r3"]}},
        {"type": "webui_tool", "card": tool},
        {"type": "message", "role": "assistant", "text": "Spawned.", "status": "done"},
        {"type": "message", "role": "user", "text": "and now?", "ts": "2"},
        {"type": "webui_tool", "card": tool},  # this run's card...
        # ...and an announce shown while that run goes on: it takes none of the run's cards.
        {
            "type": "message",
            "role": "assistant",
            "text": "Status: success",
            "announce": "k1",
            "posted": True,
            "agent": "subagent:main",
        },
        {"type": "message", "role": "assistant", "text": "", "posted": True},  # empty: skipped
        {"type": "message", "role": "assistant", "text": "Still here.", "status": "done"},
        {
            "type": "webui_subagent",
            "card": {"runId": "r1", "phase": "finished", "status": "success", "endedAt": math.nan},
        },
        {"type": "message", "role": "assistant", "text": "no key", "posted": True},
    ]
    log_text = "\n".join(json.dumps(e) for e in entries) + "\n"
    web, http = served_handmade_log(start_web_iris, tmp_path / "iris-data", log_text)
    messages = web.history(http, "handmade")
    assert [(m["role"], m.get("text"), m.get("status")) for m in messages] == [
        ("user", "spawn two", None),
        ("assistant", "Spawned.", "completed"),
        ("subagent", None, None),
        ("subagent", None, None),
        ("user", "and now?", None),
        ("assistant", "Status: success", None),
        ("assistant", "Still here.", "completed"),
        ("assistant", "no key", None),
    ]
    assert messages[1]["tools"] == [tool] and messages[6]["tools"] == [tool]
    assert messages[5]["tools"] == [] and messages[5]["id"] == "logged-k1"
    assert messages[5]["agent"] == "subagent:main" and messages[5]["posted"] is True
    assert messages[7]["id"] == "logged-14"  # no announce key: its place in the log
    first, second = messages[2]["card"], messages[3]["card"]
    # The later marker updated the first card in place (its NaN time dropped).
    assert first == {
        "runId": "r1",
        "phase": "finished",
        "status": "success",
        "index": 1,
        "label": "one",
    }
    assert second == {"runId": "r2"}  # a bool index and a string time are not kept

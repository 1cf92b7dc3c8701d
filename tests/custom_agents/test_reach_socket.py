"""The reach socket through served Iris: its ops, its errors, its rate limit and notes, over the
real unix socket and through ``iris reach`` / ``wireling``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from iris_runtime.testing.server import clean_environment
from tests.custom_agents.conftest import Setup, wait_until

BURST_WINDOW_MS = "3600000"  # 30 per hour: nothing refills while a burst is counted
REFILL_WINDOW_MS = "3000"  # 30 per 3 s: a token comes back every 100 ms


def test_the_socket_answers_each_line_and_survives_bad_ones(setup: Setup) -> None:
    setup.serve()
    mode = os.stat(setup.socket_path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    replies = setup.reach_raw(
        b'{"op": "frobnicate"}\n'
        b"not json\n"
        b"[1, 2]\n"
        b'{"no": "op"}\n'
        b'{"op": "turn.delta", "turn_id": "t_0123456789abcdef0123456789abcdef", "text": "x"}\n'
        b'{"op": "turn.delta", "turn_id": 5, "text": "x"}\n'
        + b'{"op": "note", "text": "'
        + b"a" * (1024 * 1024)
        + b'"}\n'
        b'{"op": "chats", "future": "field"}\n',
    )
    assert replies == [
        {"error": "unknown op: frobnicate"},
        {"error": "not valid JSON: send one JSON object per line"},
        {"error": 'a request is one JSON object with an "op"'},
        {"error": 'a request is one JSON object with an "op"'},
        {"error": "no such turn"},
        {"error": '"turn_id" must be a string'},
        {"error": "line too long (at most 1048576 bytes)"},
        {"ok": True, "chats": []},
    ]
    # The listener is still there for the next caller.
    with setup.reach() as reach:
        assert reach.request("chats") == {"ok": True, "chats": []}


def test_notes_to_a_named_a_default_and_an_unknown_chat(setup: Setup) -> None:
    iris = setup.serve(IRIS_DEFAULT_CHAT="SESSION-home")
    with setup.reach() as reach:
        made = reach.request("chat.new")
        chat = made["chat_id"]
        named = reach.request("note", text="Your 8am summary is ready.", source="agent", chat=chat)
        assert named == {"ok": True, "chat_id": chat}
        default = reach.request("note", text="to the default chat", **{"from": "researcher"})
        assert default["ok"] is True and default["chat_id"] != chat
        unknown = reach.request("note", text="x", chat="3f2b8c1e-7a40-4d8e-9b1c-5e6f7a8b9c0d")
        assert unknown == {"error": "no such chat: 3f2b8c1e-7a40-4d8e-9b1c-5e6f7a8b9c0d"}
        bad_from = reach.request("note", text="x", chat=chat, **{"from": "two\nlines"})
        assert bad_from == {"error": '"from" must be a name of 1-32 characters on one line'}
        listed = reach.request("chats")["chats"]
    channels = {c["chat_id"]: c["channel"] for c in listed}
    assert channels[default["chat_id"]] == "SESSION-home"
    session = channels[chat].removeprefix("SESSION-")
    history = iris.get(f"/sessions/{session}/history").json()["entries"]
    assert [e.get("text") for e in history if e.get("type") == "note"] == [
        "Your 8am summary is ready."
    ]
    home = iris.get("/sessions/home/history").json()["entries"]
    notes = [e for e in home if e.get("type") == "note"]
    assert notes[0]["text"] == "to the default chat" and notes[0]["from"] == "researcher"
    assert any(e.get("text") == "researcher: to the default chat" for e in home)


def test_a_note_without_any_chat_is_refused_when_no_default_is_set(setup: Setup) -> None:
    setup.serve()
    with setup.reach() as reach:
        assert reach.request("note", text="hello") == {
            "error": "no chat given and no default chat is set (IRIS_DEFAULT_CHAT)"
        }


def test_the_rate_limit_refuses_the_eleventh_of_a_burst(setup: Setup) -> None:
    setup.serve(IRIS_DEFAULT_CHAT="SESSION-home", IRIS_REACH_RATE_WINDOW_MS=BURST_WINDOW_MS)
    with setup.reach() as reach:
        ops = ["note", "chat.new", "run"] * 4
        replies = []
        for op in ops[:11]:
            fields = {} if op == "chat.new" else {"text": "[SILENT] burst"}
            replies.append(reach.request(op, **fields))
        assert all(r.get("ok") for r in replies[:10]), replies
        assert replies[10] == {"error": "rate limited"}
        # chats is never limited.
        assert reach.request("chats")["ok"] is True


def test_the_rate_limit_refills_with_time(setup: Setup) -> None:
    setup.serve(IRIS_DEFAULT_CHAT="SESSION-home", IRIS_REACH_RATE_WINDOW_MS=REFILL_WINDOW_MS)
    with setup.reach() as reach:
        while reach.request("note", text="[SILENT] drain").get("ok"):
            pass  # empty the bucket (it refills as we go, so keep on until refused)
        refilled = wait_until(lambda: reach.request("note", text="again").get("ok"))
        assert refilled is True


def test_run_starts_a_turn_as_if_the_owner_had_written(setup: Setup) -> None:
    iris = setup.serve(IRIS_DEFAULT_CHAT="SESSION-home")
    with setup.reach() as reach:
        assert reach.request("run", text="hello from cron", **{"from": "cron"})["ok"] is True

    def answered() -> bool:
        entries = iris.get("/sessions/home/history").json()["entries"]
        return any(e.get("role") == "assistant" for e in entries)

    wait_until(answered)
    entries = iris.get("/sessions/home/history").json()["entries"]
    user = next(e for e in entries if e.get("role") == "user")
    assert user["text"] == "hello from cron" and user["user"] == "cron"


def test_the_wireling_command_speaks_for_scripts(setup: Setup) -> None:
    iris = setup.serve(IRIS_DEFAULT_CHAT="SESSION-home")
    env = clean_environment(WIRELING_REACH_SOCK=str(setup.socket_path))
    wireling = str(Path(sys.executable).parent / "wireling")
    made = subprocess.run([wireling, "chat.new"], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    chat = made.stdout.strip()
    noted = subprocess.run(
        [wireling, "note", "--chat", chat, "--from", "researcher", "done", "for", "today"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert noted.returncode == 0 and noted.stdout.strip() == chat, noted.stderr
    # Inside a turn the chat comes from IRONWIRE_CHAT_ID.
    inside = subprocess.run(
        [sys.executable, "-m", "iris_runtime", "reach", "note", "from", "inside"],
        env={**env, "IRONWIRE_CHAT_ID": chat},
        capture_output=True,
        text=True,
    )
    assert inside.returncode == 0 and inside.stdout.strip() == chat, inside.stderr
    unknown = subprocess.run(
        [wireling, "note", "--chat", "nope", "x"], env=env, capture_output=True, text=True
    )
    assert unknown.returncode == 1 and "no such chat: nope" in unknown.stderr
    listed = subprocess.run([wireling, "chats"], env=env, capture_output=True, text=True)
    assert chat in listed.stdout
    gone = subprocess.run(
        [wireling, "chats"],
        env={**env, "WIRELING_REACH_SOCK": str(setup.socket_dir / "nothing.sock")},
        capture_output=True,
        text=True,
    )
    assert gone.returncode == 1 and "cannot reach Iris at" in gone.stderr
    session = next(
        line.split()[1] for line in listed.stdout.splitlines() if line.startswith(chat)
    ).removeprefix("SESSION-")
    notes = [
        e["text"]
        for e in iris.get(f"/sessions/{session}/history").json()["entries"]
        if e.get("type") == "note"
    ]
    assert notes == ["done for today", "from inside"]


def test_a_note_from_inside_a_turn_and_a_chat_from_a_relay_turn(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    reply = setup.ask("inside", "@butler note")
    assert reply.status == 200, reply.body
    note = next(e for e in agent.entries() if e.get("op") == "note")
    chat = agent.posts("message")[0]["chat_id"]
    assert note["reply"] == {"ok": True, "chat_id": chat}
    entries = iris.get("/sessions/inside/history").json()["entries"]
    assert [e["text"] for e in entries if e.get("type") == "note"] == ["a note from inside"]


def test_a_group_may_be_let_onto_the_socket(setup: Setup) -> None:
    import grp

    group = grp.getgrgid(os.getgid()).gr_name
    setup.serve(IRIS_REACH_GROUP=group)
    info = os.stat(setup.socket_path)
    assert stat.S_IMODE(info.st_mode) == 0o660 and info.st_gid == os.getgid()

"""A conversation over the WebSocket: streamed replies, tool cards, Stop, queueing, two tabs,
history after a reconnect, bad frames, and events addressed to the channel through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import websocket
from server_harness import Frame, WebIris, is_final

TOOL_RULES: list[dict[str, Any]] = [
    {
        "when": "list files",
        "turns": [
            [
                {"text": "Looking."},
                {
                    "tool": "bash",
                    "id": "call-ls",
                    "args": {"command": "echo tool-ran"},
                },
            ],
            [{"text": "Done."}],
        ],
    },
    {"when": "slow", "turns": [[{"text": "partial"}, {"sleep": 60}, {"text": " never"}]]},
    {"when": "stream", "turns": [[{"text": "Hello"}, {"text": " world"}]]},
    {"when": "quiet", "turns": [[{"text": "[SIL"}, {"text": "ENT] nothing to say"}]]},
]


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def bare(frame: Frame) -> Frame:
    """A frame without its run number (tests that are not about run numbers)."""
    return {k: v for k, v in frame.items() if k != "run"}


@pytest.fixture
def web(start_web_iris: Callable[..., WebIris]) -> WebIris:
    return start_web_iris(TOOL_RULES)


def test_a_tool_call_streams_replies_and_a_card(web: WebIris) -> None:
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session)
    assert sock.recv()["type"] == "ready"
    sock.send({"type": "message", "text": "list files please"})
    frames = sock.final()

    assert frames[0] == {"type": "user", "text": "list files please", "files": []}
    # Everything the run says carries its number; the run announces itself first.
    assert frames[1] == {"type": "run", "state": "started", "run": 1}
    assert all(f["run"] == 1 for f in frames[1:]), frames
    assert {"type": "status", "text": "→ running bash", "run": 1} in frames
    replies = of(frames, "reply")
    assert [r["text"] for r in replies] == ["Looking.", "Looking.\n\nDone.", "Looking.\n\nDone."]
    assert [r["final"] for r in replies] == [False, False, True]
    assert replies[-1]["status"] == "completed"

    start, end = of(frames, "tool")
    assert (start["phase"], end["phase"]) == ("start", "end")
    for card in (start, end):
        assert card["id"] == "call-ls" and card["name"] == "bash" and card["kind"] == "execute"
        # bash takes no description: the subtitle falls back to its command
        assert card["subtitle"] == "echo tool-ran" and card["title"] == "Run a command"
        assert card["input"] == {"command": "echo tool-ran"}
    assert start["result"] is None
    assert "tool-ran" in end["result"] and end["is_error"] is False
    # The card sits between the first reply and the second, as the run produced them.
    assert frames.index(replies[0]) < frames.index(start) < frames.index(end)
    assert frames.index(end) < frames.index(replies[1])

    # Another tab, opened afterwards, rebuilds the same conversation from the log.
    history = web.history(http, session)
    assert [(m["role"], m["text"]) for m in history] == [
        ("user", "list files please"),
        ("assistant", "Looking.\n\nDone."),
    ]
    card = {k: v for k, v in end.items() if k not in {"type", "phase", "run"}}
    assert history[1]["tools"] == [card] and history[1]["status"] == "completed"
    listed = http.get(f"{web.url}/api/sessions", timeout=30).json()
    assert listed[0]["id"] == session and listed[0]["title"] == "list files please"


def test_stop_ends_the_run_as_stopped_and_two_tabs_follow(web: WebIris) -> None:
    http = web.login()
    session = web.new_session(http)
    tab1, tab2 = web.connect(http, session), web.connect(http, session)
    assert tab1.recv()["type"] == tab2.recv()["type"] == "ready"
    tab1.send({"type": "message", "text": "slow one"})
    # The model has said "partial" (and now sleeps): the stop below lands after it, whatever the
    # first run of a fresh server spends loading.
    tab1.until(lambda f: f["type"] == "reply" and f["text"] == "partial")
    tab2.send({"type": "message", "text": "and another"})  # from the other tab: it waits
    queued = tab1.until(lambda f: f["type"] == "queued")
    assert {"type": "user", "text": "and another", "files": [], "queued": True} in queued
    assert queued[-1] == {"type": "queued", "position": 1}

    reconnected = web.connect(http, session)
    assert reconnected.recv()["running"] is True
    reconnected.close()

    tab2.send({"type": "stop"})
    for tab in (tab1, tab2):
        # The waiting message runs next and gets its own answer, in a run of its own. Its
        # frames, even its final reply, may come before the stopped run's final reply: the run
        # numbers tell them apart (the page files every frame under its run).
        finals: dict[int, Frame] = {}

        def both_final(frame: Frame, finals: dict[int, Frame] = finals) -> bool:
            if is_final(frame):
                finals[frame["run"]] = frame
            return len(finals) == 2

        frames = tab.until(both_final)
        assert finals[1]["status"] == "stopped" and finals[1]["text"] == "partial"
        assert finals[2]["text"] == "echo: and another" and finals[2]["status"] == "completed"
        assert {"type": "run", "state": "started", "run": 2} in frames
        assert {f["run"] for f in frames if "run" in f} == {1, 2}
    assert [m["status"] for m in web.history(http, session) if m["role"] == "assistant"] == [
        "stopped",
        "completed",
    ]


def test_bad_frames_are_answered_and_oversized_ones_close_the_socket(web: WebIris) -> None:
    *_, sock = web.open_conversation()
    sock.ws.send("not json")
    assert sock.recv()["code"] == "invalid_frame"
    sock.send({"type": "dance"})
    assert sock.recv()["code"] == "invalid_frame"
    sock.send({"type": "message", "text": "x" * (32 * 1024 + 1)})
    assert sock.recv()["code"] == "message_too_long"
    sock.send({"type": "message", "text": "hi", "files": ["../../api-token"]})
    assert sock.recv()["code"] == "unknown_attachment"
    sock.send({"type": "ping"})
    assert sock.recv() == {"type": "pong"}
    sock.ws.send('{"type": "message", "text": "\\ud800"}')  # a lone surrogate: not text
    assert sock.recv()["code"] == "invalid_frame"
    sock.ws.send("[" * 30_000 + "]" * 30_000)  # too deep for the JSON parser: not a crash
    assert sock.recv()["code"] == "invalid_frame"
    sock.send({"type": "ping"})
    assert sock.recv() == {"type": "pong"}  # and the socket still works

    sock.send({"type": "message", "text": "y" * (64 * 1024)})  # the frame's JSON is over 64 KiB
    error = sock.recv()
    assert error["type"] == "error" and error["code"] == "frame_too_large"
    opcode, payload = sock.ws.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(payload[:2], "big") == 1009


def test_an_api_event_for_a_webui_channel_reaches_the_browser(web: WebIris) -> None:
    _, session, sock = web.open_conversation()
    reply = web.server.post(
        f"/channels/WEBUI-{session}/events", json_body={"text": "a reminder from the API"}
    )
    assert reply.status == 202 and reply.json()["transport"] == "webui"  # not the bridge
    frames = sock.final()
    assert frames[0] == {
        "type": "user",
        "text": "a reminder from the API",
        "files": [],
        "event": True,
    }
    assert frames[-1]["text"] == "echo: a reminder from the API"
    assert frames[-1]["status"] == "completed"


def test_an_escalation_posted_to_the_conversation_shows_and_stays(web: WebIris) -> None:
    http, session, sock = web.open_conversation()
    reply = web.server.post(
        "/escalate", json_body={"text": "disk full", "channel": f"WEBUI-{session}"}
    )
    assert reply.status == 202 and reply.json()["transport"] == "webui"
    post = sock.recv()
    assert post["type"] == "post" and post["id"] == reply.json()["messageId"]
    assert "disk full" in post["text"]
    history = web.history(http, session)
    assert [(m["role"], m["text"], m.get("id")) for m in history] == [
        ("assistant", post["text"], post["id"])
    ]


def test_text_streams_while_the_model_writes_and_silence_stays_silent(web: WebIris) -> None:
    *_, sock = web.open_conversation()
    sock.send({"type": "message", "text": "stream it"})
    replies = of(sock.final(), "reply")
    # The first piece of a turn shows at once; the turn's whole text follows, then the end.
    assert bare(replies[0]) == {"type": "reply", "text": "Hello", "final": False}
    assert bare(replies[-2]) == {"type": "reply", "text": "Hello world", "final": False}
    assert replies[-1]["text"] == "Hello world" and replies[-1]["final"] is True

    sock.send({"type": "message", "text": "be quiet"})
    frames = sock.final()
    assert [f["text"] for f in of(frames, "reply")] == [""]  # only the (empty) final one
    assert not [f for f in frames if "SIL" in str(f.get("text", ""))]

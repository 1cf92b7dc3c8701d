"""A first look: log in, open a socket, get a reply."""

from __future__ import annotations

from collections.abc import Callable

from server_harness import WebIris, is_final


def test_a_message_gets_a_streamed_reply(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris()
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session)
    ready = sock.recv()
    assert ready == {"type": "ready", "session": session, "agent": None, "running": False}
    sock.send({"type": "message", "text": "hello there"})
    frames = sock.final()
    assert frames[0] == {"type": "user", "text": "hello there", "files": []}
    assert is_final(frames[-1]) and frames[-1]["text"] == "echo: hello there"

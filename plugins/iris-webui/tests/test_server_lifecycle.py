"""Restarts: a logged-in browser stays logged in, a new login link is printed, and open sockets
are told Iris is going away (close 1001) instead of being held until the grace period ends."""

from __future__ import annotations

from collections.abc import Callable

import websocket
from server_harness import WebIris


def test_sessions_survive_a_restart_and_sockets_are_closed_on_shutdown(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    first_key = web.login_key()
    http = web.login()
    session = web.new_session(http)
    sock = web.connect(http, session)
    assert sock.recv()["type"] == "ready"

    web.server.stop()
    opcode, payload = sock.ws.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(payload[:2], "big") == 1001

    web.server.start()
    assert web.login_key() != first_key  # each start prints a fresh link
    assert http.get(f"{web.url}/api/sessions", timeout=30).status_code == 200
    again = web.connect(http, session)
    assert again.recv()["type"] == "ready"

"""Restarts: a logged-in browser stays logged in, a new login link is printed, and open sockets
are told Iris is going away (close 1001) instead of being held until the grace period ends."""

from __future__ import annotations

from collections.abc import Callable

import pytest
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


def test_sockets_beyond_the_stream_slots_are_refused_not_hung(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris(IRIS_MAX_STREAMS="2")  # two sockets; pages keep threads of their own
    http = web.login()
    session = web.new_session(http)
    for _ in range(2):
        assert web.connect(http, session).recv()["type"] == "ready"
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        web.connect(http, session)
    assert refused.value.status_code == 503
    assert refused.value.resp_headers["retry-after"] == "5"
    assert http.get(f"{web.url}/api/sessions", timeout=30).status_code == 200  # still served
    web.sockets[0].close()
    web.sockets.pop(0)
    again = web.until_connected(http, session)
    assert again.recv()["type"] == "ready"

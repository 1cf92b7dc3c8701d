"""A job-log poll refused with 401 ends the call at once with a clear error, instead of polling
on until the idle timeout: a peer that accepts the request, cuts its stream after one status
line, and then refuses to show the job log (as an agent restarted with a new token would)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from iris_runtime.bridge.client import BridgeCall, BridgeError, call_agent_bridge


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: a cut stream

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.wfile.write(b'{"type":"accepted","requestId":"r-1","protocol":1}\n')
        self.wfile.write(b'{"type":"status","text":"working","seq":1}\n')

    def do_GET(self) -> None:
        self.server.polls += 1  # type: ignore[attr-defined]
        body = b'{"error":"this agent\'s API token is required","code":"unauthorized"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def refusing_peer() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.polls = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_refused_poll_fails_at_once(refusing_peer: ThreadingHTTPServer) -> None:
    call = BridgeCall(
        bridge_url=f"http://127.0.0.1:{refusing_peer.server_address[1]}",
        text="hi",
        agent="helper",
        request_id="r-1",
        token="old-token",
        idle_timeout=5,
        deadline=60,
    )
    with pytest.raises(BridgeError) as caught:
        call_agent_bridge(call)
    assert caught.value.code == "unauthorized" and "HTTP 401" in caught.value.message
    assert "iris bridge recover helper r-1" in caught.value.message
    assert "old-token" not in caught.value.message
    assert refusing_peer.polls == 1  # type: ignore[attr-defined]  # not polled on and on

"""Helpers for talking to a real served Iris: an SSE reader and a background caller."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from iris_runtime.testing.server import HttpReply, IrisServer


class SSEReader:
    """Reads ``event:``/``data:`` pairs from GET /sessions/<id>/stream on a background thread."""

    def __init__(self, server: IrisServer, session: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        self.conn.request(
            "GET",
            f"/sessions/{session}/stream",
            headers={"Authorization": f"Bearer {server.token}"},
        )
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.events: list[dict[str, Any]] = []
        self.comments: list[str] = []
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = self.response.read()

    def _read(self) -> None:
        kind = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    self.events.append({"event": kind, **json.loads(line[6:])})
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            # closed under us by close(): the test is done with this stream
            return

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 15
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.events):
                return
            time.sleep(0.02)
        raise AssertionError(f"stream never matched; got {self.events}")

    def close(self) -> None:
        self.conn.close()


def in_background(call: Callable[[], HttpReply]) -> Callable[[float], HttpReply]:
    """Start ``call`` on a thread; the returned function waits for its reply."""
    box: list[HttpReply] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()

    def result(timeout: float = 30) -> HttpReply:
        thread.join(timeout)
        assert box, "the call did not return in time"
        return box[0]

    return result

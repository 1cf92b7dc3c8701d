"""Socket Mode: the WebSocket connections ``apps.connections.open`` hands out, and the delivery of
Events API envelopes over them.

A connection gets a ``hello`` when it opens. Each envelope goes over the newest open connection
and stays in flight until the client acknowledges its ``envelope_id``; envelopes sent while no
connection is open wait in a queue. Pings are answered. When a connection closes or drops, its
unacknowledged envelopes go back to the front of the queue with ``retry_attempt`` counted up, as
Slack delivers them again.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from collections import deque
from typing import Any

from iris_runtime.testing.fake_slack import websocket as ws
from iris_runtime.testing.fake_slack.http_handler import SlackHandler


class _Socket:
    """One Socket Mode connection."""

    def __init__(self, connection: socket.socket, number: int) -> None:
        self.connection = connection
        self.number = number
        self.lock = threading.Lock()
        self.in_flight: dict[str, dict[str, Any]] = {}
        self.closed = False

    def send_text(self, payload: Any) -> None:
        frame = ws.encode_frame(ws.OP_TEXT, json.dumps(payload).encode("utf-8"))
        self.send_raw(frame)

    def send_raw(self, frame: bytes) -> None:
        with self.lock:
            if self.closed:
                raise OSError("socket closed")
            self.connection.sendall(frame)

    def kill(self) -> None:
        with self.lock:
            self.closed = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class SocketMode:
    """The connections, the envelope queue and the acknowledgements. ``cond`` is the workspace's
    condition: every change here notifies it too."""

    def __init__(self, cond: threading.Condition) -> None:
        self.acks: list[str] = []
        """Envelope ids the client acknowledged, in order."""
        self.connections_opened = 0
        self._cond = cond
        self._tickets: set[str] = set()
        self._sockets: list[_Socket] = []
        self._outbox: deque[dict[str, Any]] = deque()

    def new_ticket(self) -> str:
        """A ticket for the ``/link`` URL of ``apps.connections.open``."""
        ticket = secrets.token_hex(12)
        with self._cond:
            self._tickets.add(ticket)
        return ticket

    def deliver(self, envelope: dict[str, Any]) -> None:
        """Queue an envelope and send what the open connections can take."""
        with self._cond:
            self._outbox.append(envelope)
        self._pump()

    def live(self) -> list[_Socket]:
        with self._cond:
            return [s for s in self._sockets if not s.closed]

    def request_disconnect(self, reason: str) -> None:
        for sock in self.live():
            with contextlib.suppress(OSError):
                sock.send_text({"type": "disconnect", "reason": reason, "debug_info": {}})

    def drop_all(self) -> None:
        """Cut every connection without a close frame."""
        for sock in self.live():
            sock.kill()

    def serve(self, handler: SlackHandler, query: dict[str, str]) -> None:
        """Upgrade the request to a WebSocket and serve it until it closes."""
        key = handler.headers.get("Sec-WebSocket-Key")
        with self._cond:
            known = query.get("ticket") in self._tickets
        upgrade = handler.headers.get("Upgrade", "").lower() == "websocket"
        if not (key and known and upgrade):
            handler.send_plain(401 if not known else 400, b"bad socket mode request")
            return
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", ws.accept_key(key))
        handler.end_headers()
        handler.wfile.flush()
        handler.close_connection = True
        with self._cond:
            self.connections_opened += 1
            sock = _Socket(handler.connection, self.connections_opened)
        sock.send_text(
            {
                "type": "hello",
                "num_connections": len(self.live()) + 1,
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                "connection_info": {"app_id": "AFAKE0001"},
            }
        )
        with self._cond:
            self._sockets.append(sock)
            self._cond.notify_all()
        self._pump()
        try:
            self._read(handler, sock)
        finally:
            sock.kill()
            self._closed(sock)

    def _read(self, handler: SlackHandler, sock: _Socket) -> None:
        pieces: list[bytes] = []
        while not sock.closed:
            try:
                fin, opcode, payload = ws.read_frame(handler.rfile)
            except (EOFError, OSError, ws.ProtocolError):
                return
            if opcode == ws.OP_PING:
                with contextlib.suppress(OSError):
                    sock.send_raw(ws.encode_frame(ws.OP_PONG, payload))
            elif opcode == ws.OP_CLOSE:
                with contextlib.suppress(OSError):
                    sock.send_raw(ws.encode_frame(ws.OP_CLOSE, payload[:2]))
                return
            elif opcode in {ws.OP_TEXT, ws.OP_CONTINUATION}:
                pieces.append(payload)
                if fin:
                    self._client_text(sock, b"".join(pieces))
                    pieces = []

    def _client_text(self, sock: _Socket, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if isinstance(envelope_id, str):
            with self._cond:
                sock.in_flight.pop(envelope_id, None)
                self.acks.append(envelope_id)
                self._cond.notify_all()

    def _pump(self) -> None:
        """Send queued envelopes over the newest open connection."""
        while True:
            with self._cond:
                live = [s for s in self._sockets if not s.closed]
                if not live or not self._outbox:
                    return
                target = live[-1]
                envelope = self._outbox.popleft()
                target.in_flight[envelope["envelope_id"]] = envelope
            try:
                target.send_text(envelope)
            except OSError:
                self._closed(target)

    def _closed(self, sock: _Socket) -> None:
        with self._cond:
            sock.closed = True
            if sock in self._sockets:
                self._sockets.remove(sock)
            # Slack delivers unacknowledged events again, counting the attempts.
            for envelope in sock.in_flight.values():
                envelope["retry_attempt"] += 1
                envelope["retry_reason"] = "timeout"
                self._outbox.appendleft(envelope)
            sock.in_flight.clear()
            self._cond.notify_all()

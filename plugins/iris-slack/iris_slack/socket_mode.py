"""The Socket Mode connection: the SDK's built-in client (``slack_sdk.socket_mode.builtin``).

Why not the SDK's websocket-client adapter: its ``connect()`` only creates the WebSocket (a
runner thread opens it up to 0.5 s later) and starts the monitor, whose first check finds no
socket yet and connects again; the first WebSocket is closed while it opens, and Slack keeps a
connection nobody reads, so events sent to it wait for Slack's redelivery. The built-in
``connect()`` opens the WebSocket before it starts the monitor.

Two fixes on top, both for slack_sdk 3.48 and harmless once the SDK does the same:

* End of stream: the built-in client takes an empty read (Slack, or anything in between,
  closed the TCP connection without a WebSocket close frame) for "nothing yet" and reads again
  at once, a core busy, until five pings have failed (about 25 s). Here that read raises
  ``ConnectionError``, which ends the connection like any socket error (as later slack_sdk
  source does); the monitor opens a new one at its next check.
* Closing: ``close()`` waits for the reading thread's receive timeout (up to 3 s); the socket
  is shut down first here, so that read returns at once. A connection that finishes opening
  after ``close()`` is closed too (it would otherwise start the monitor of a closed client).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from slack_sdk.socket_mode.builtin import SocketModeClient as BuiltinSocketModeClient


class _EndOfStream:
    """A connection's socket whose ``recv`` raises at end of stream, except while closing."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.closing = False

    def recv(self, size: int, *flags: int) -> bytes:
        data: bytes = self._sock.recv(size, *flags)
        if not data and size > 0 and not self.closing:
            raise ConnectionError("Slack closed the Socket Mode connection")
        return data

    def wake(self) -> None:
        """End a read in progress: it returns the end of stream, which is no error now."""
        self.closing = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class SocketModeClient(BuiltinSocketModeClient):
    def connect(self) -> None:
        super().connect()
        # The reading thread takes ``session.sock`` afresh for every read, so this applies from
        # its next read on.
        session = self.current_session
        sock: Any = session.sock if session is not None else None
        if session is not None and sock is not None and not isinstance(sock, _EndOfStream):
            session.sock = _EndOfStream(sock)  # type: ignore[assignment]
        if self.closed:  # close() ran while this connection was opening: it must not stay
            self.disconnect()
            self.current_app_monitor.event.set()  # nor the monitor this call may have started

    def close(self) -> None:
        self.closed = True
        self.auto_reconnect_enabled = False
        self.current_session_state.terminated = True
        session = self.current_session
        sock: Any = session.sock if session is not None else None
        if isinstance(sock, _EndOfStream):
            sock.wake()
        super().close()

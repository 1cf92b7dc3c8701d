"""The loopback HTTP server the wire-level fakes (LLM APIs, Slack, Telegram) run on.

Each fake answers real client libraries over real sockets, so each needs a server that starts on
a free 127.0.0.1 port and stops *cleanly*: a test suite that starts hundreds of fakes must not
leak a thread or a socket from any of them, and a thread still running after ``stop()`` is a bug
to report, not to ignore. This module is the one implementation of that lifecycle; the fakes keep
only their request handlers (what a request means and how to answer it).

- :class:`TrackingHTTPServer` is a ``ThreadingHTTPServer`` that tracks every open connection and
  every handler thread, so stopping can shut the connections (waking handlers blocked on a read
  or a stall) and join the threads. It sets ``TCP_NODELAY`` on each connection: real API servers
  send each small write (a streamed event, a WebSocket frame) at once, and without it Nagle's
  algorithm holds the last one for a delayed ACK (~40 ms), making every exchange look slower. An
  exception escaping a handler that is not an ``OSError`` (connection errors are the client's
  business) is a bug in the fake; its traceback goes to ``owner.errors`` for the test to see.
- :class:`LoopbackHTTPService` starts one on a thread, exposes :attr:`~LoopbackHTTPService.port`
  and :attr:`~LoopbackHTTPService.base_url`, and :meth:`~LoopbackHTTPService.stop` stops
  accepting, shuts every open connection, joins every thread and closes every socket.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["ErrorSink", "LoopbackHTTPService", "TrackingHTTPServer"]

HOST = "127.0.0.1"


class ErrorSink(Protocol):
    """What a server's owner must offer: a list that collects the fake's own bugs."""

    errors: list[str]


OwnerT = TypeVar("OwnerT", bound=ErrorSink)


class TrackingHTTPServer(ThreadingHTTPServer, Generic[OwnerT]):
    """A threading HTTP server on a free loopback port that knows its connections and threads.

    ``owner`` is whatever the handlers answer for (reachable as ``handler.server.owner``);
    ``name`` prefixes the handler threads' names. :attr:`stopping` is set when the service stops,
    for handlers that wait (a stalled stream, a long poll) to wake up and give up.
    """

    daemon_threads = True  # a safety net only: LoopbackHTTPService.stop() joins every thread

    def __init__(
        self, owner: OwnerT, handler_class: type[BaseHTTPRequestHandler], *, name: str
    ) -> None:
        self.owner = owner
        self.name = name
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self._count = 0
        super().__init__((HOST, 0), handler_class)

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self._count += 1
            thread = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name=f"{self.name}-conn-{self._count}",
                daemon=True,
            )
            self.connections.add(request)
            self.handler_threads.add(thread)
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.connections.discard(request)
                self.handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Connection errors are the clients' business (timeouts, dropped streams); anything else is
        # a bug in the fake, kept for the test to see.
        if not isinstance(sys.exc_info()[1], OSError):
            self.owner.errors.append(traceback.format_exc())

    def drop_connections(self) -> list[threading.Thread]:
        """Shut every open connection (both directions); returns the handler threads to join."""
        with self.lock:
            connections = list(self.connections)
            handlers = list(self.handler_threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        return handlers


class LoopbackHTTPService(Generic[OwnerT]):
    """Runs a :class:`TrackingHTTPServer` for ``owner`` on a thread, between :meth:`start` and
    :meth:`stop`.

    ``name`` names the threads and the error raised when some survive :meth:`stop`; ``label``
    (``name`` by default) is what the "not started" / "already started" errors call the server.
    """

    def __init__(
        self,
        owner: OwnerT,
        handler_class: type[BaseHTTPRequestHandler],
        *,
        name: str,
        label: str | None = None,
    ) -> None:
        self._owner = owner
        self._handler_class = handler_class
        self.name = name
        self.label = label or name
        self._httpd: TrackingHTTPServer[OwnerT] | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(f"{self.label} is not started")
        port: int = self._httpd.server_address[1]
        return port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, no trailing slash."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError(f"{self.label} is already started")
        httpd = TrackingHTTPServer(self._owner, self._handler_class, name=self.name)
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}-server",
            daemon=True,
        )
        self._httpd, self._thread = httpd, thread
        thread.start()

    def stop(self, timeout: float = 5.0, *, raise_if_stuck: bool = True) -> None:
        """Stop accepting, drop every open connection, join every thread (``timeout`` seconds
        each), close every socket. A thread still running afterwards raises ``RuntimeError``
        unless ``raise_if_stuck`` is false. Does nothing if not started."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._httpd = self._thread = None
        httpd.stopping.set()
        httpd.shutdown()
        thread.join(timeout)
        handlers = httpd.drop_connections()
        for handler in handlers:
            handler.join(timeout)
        httpd.server_close()
        stuck = [t.name for t in [thread, *handlers] if t.is_alive()]
        if stuck and raise_if_stuck:
            raise RuntimeError(f"{self.name}.stop(): threads still running: {stuck}")

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
- :class:`LoopbackHandler` is the request handler the fakes build on: HTTP/1.1, GET and POST
  handed to one :meth:`~LoopbackHandler.dispatch`, the body read by its ``Content-Length``.
- :class:`LoopbackFake` is the lifecycle the fakes offer a test: ``port``, ``start()``,
  ``stop()`` and ``with``; :func:`wait_until` is the wait behind their ``wait_for``.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, Self, TypeVar

from iris_runtime.testing.scoped import Scoped

__all__ = [
    "ErrorSink",
    "LoopbackFake",
    "LoopbackHTTPService",
    "LoopbackHandler",
    "TrackingHTTPServer",
    "wait_until",
]

HOST = "127.0.0.1"


class ErrorSink(Protocol):
    """What a server's owner must offer: a list that collects the fake's own bugs."""

    errors: list[str]


OwnerT = TypeVar("OwnerT", bound=ErrorSink)
T = TypeVar("T")


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


class LoopbackHandler(BaseHTTPRequestHandler, ABC):
    """A fake's request handler: HTTP/1.1 (keep-alive, as the real APIs and their clients use
    it), GET and POST handed to :meth:`dispatch`, and no access log on stderr (a test reads the
    fake's own records instead)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.dispatch()

    def do_POST(self) -> None:
        self.dispatch()

    @abstractmethod
    def dispatch(self) -> None:
        """Read the request and answer it."""

    def read_body(self) -> bytes:
        """The request body, by its ``Content-Length`` (none when that is missing or not a
        number)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackFake(Scoped):
    """The lifecycle a fake offers a test, around the service its ``__init__`` sets as
    ``_service``: :attr:`port`, :meth:`start`, :meth:`stop`, and ``with`` (which starts the
    fake unless it runs already, and stops it at the end)."""

    _service: LoopbackHTTPService[Any]

    @property
    def port(self) -> int:
        return self._service.port

    def start(self) -> Self:
        self._service.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, drop every open connection, join every thread, close every socket."""
        self._service.stop(timeout)

    def _bring_up(self) -> None:
        if not self._service.running:
            self.start()

    def _take_down(self) -> None:
        self.stop()


def wait_until(cond: threading.Condition, probe: Callable[[], T], timeout: float, poll: float) -> T:
    """The first truthy ``probe()``, checked again whenever ``cond`` is notified (and every
    ``poll`` seconds); after ``timeout`` seconds, the last (falsy) one."""
    deadline = time.monotonic() + timeout
    with cond:
        while True:
            value = probe()
            remaining = deadline - time.monotonic()
            if value or remaining <= 0:
                return value
            cond.wait(min(remaining, poll))

"""What both fakes share: the HTTP plumbing, the reply queue, and the course of an answer (a
refused request, a scripted failure, a stream or a whole response; the API's own shapes are the
subclasses' business).

:class:`FakeLLMServer` serves on a :mod:`iris_runtime.testing.loopback_http` server (a free
127.0.0.1 port): HTTP/1.1 with keep-alive, ``Content-Length`` bodies for plain responses and
chunked transfer encoding for streams (so a ``Disconnect`` is an *incomplete* body to the client,
not a clean end). It records requests and serves scripted replies in order. ``stop()`` stops
accepting, shuts down every open connection (waking any ``Stall``), joins every thread and
closes every socket.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import string
import threading
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from iris_runtime.testing.fake_llm.script import DEFAULT_REPLY, Disconnect, Fail, Reply, Stall, Step
from iris_runtime.testing.loopback_http import (
    LoopbackFake,
    LoopbackHandler,
    LoopbackHTTPService,
    TrackingHTTPServer,
)

# The key the fakes accept unless told otherwise (and the shipped fixtures use).
FAKE_API_KEY = "test-key"

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int = 24) -> str:
    """``prefix`` + ``length`` random base62 characters (the shape of both APIs' ids)."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def pieces(text: str, count: int = 3) -> list[str]:
    """``text`` cut into at most ``count`` non-empty pieces of about equal size."""
    if not text:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def compact_json(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def retry_headers(fail: Fail) -> dict[str, str]:
    """The ``retry-after`` and ``x-should-retry`` headers a :class:`Fail` asks for (both APIs
    send them, and both SDKs obey them)."""
    headers: dict[str, str] = {}
    if fail.retry_after is not None:
        headers["retry-after"] = format(fail.retry_after, "g")
    if fail.should_retry is not None:
        headers["x-should-retry"] = "true" if fail.should_retry else "false"
    return headers


# --- HTTP plumbing -------------------------------------------------------------------------------


class Abort(Exception):
    """Unwinds a response that must end now (disconnect, client gone, server stopping)."""


class Exchange:
    """One request and the means to answer it, handed to :meth:`FakeLLMServer.handle`."""

    def __init__(self, handler: _Handler, raw_body: bytes) -> None:
        self._handler = handler
        self._stopping = handler.server.stopping
        self.method = handler.command
        self.path = handler.path.split("?", 1)[0]
        self.headers = {key.lower(): value for key, value in handler.headers.items()}
        self.raw_body = raw_body
        try:
            self.body: Any = json.loads(raw_body) if raw_body else None
        except ValueError:
            self.body = None
        self.headers_sent = False

    def _write(self, data: bytes) -> None:
        try:
            self._handler.wfile.write(data)
        except OSError as err:  # the client went away
            raise Abort from err

    def _head(self, status: int, headers: dict[str, str]) -> None:
        handler = self._handler
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        try:
            handler.end_headers()
        except OSError as err:
            raise Abort from err
        self.headers_sent = True

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._head(
            status,
            {
                "Content-Type": "application/json",
                "Content-Length": str(len(body)),
                **(headers or {}),
            },
        )
        self._write(body)

    def begin_stream(self, headers: dict[str, str] | None = None) -> None:
        """A 200 ``text/event-stream`` response with a chunked body."""
        self._head(
            200,
            {
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "Transfer-Encoding": "chunked",
                **(headers or {}),
            },
        )

    def send_chunk(self, data: bytes) -> None:
        if data:
            self._write(b"%X\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self._write(b"0\r\n\r\n")

    def disconnect(self) -> None:
        """Close the connection now (FIN, no final chunk) and unwind the response."""
        self._handler.close_connection = True
        with contextlib.suppress(OSError):
            self._handler.connection.shutdown(socket.SHUT_RDWR)
        raise Abort

    def stall(self, seconds: float) -> None:
        if self._stopping.wait(max(0.0, seconds)):
            self._handler.close_connection = True
            raise Abort

    def perform(self, step: Step) -> bool:
        """Carry out a step that means the same on both APIs, streamed or not: a :class:`Stall`
        waits, a :class:`Disconnect` drops the connection. False for any other step."""
        if isinstance(step, Stall):
            self.stall(step.seconds)
        elif isinstance(step, Disconnect):
            self.disconnect()
        else:
            return False
        return True


class _Handler(LoopbackHandler):
    server: TrackingHTTPServer[FakeLLMServer]

    # Every verb reaches the fake, which answers a wrong one as the API does (404).
    def do_PUT(self) -> None:
        self.dispatch()

    def do_DELETE(self) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        exchange = Exchange(self, self.read_body())
        owner = self.server.owner
        owner._record(exchange)
        try:
            owner.handle(exchange)
        except Abort:
            self.close_connection = True
        except Exception as err:
            owner.errors.append(traceback.format_exc())
            self.close_connection = True
            if not exchange.headers_sent:
                message = f"fake server error: {type(err).__name__}: {err}"
                with contextlib.suppress(Abort):
                    exchange.send_json(500, {"error": {"type": "api_error", "message": message}})


class FakeLLMServer(LoopbackFake, ABC):
    """Base of :class:`FakeAnthropic` and :class:`FakeOpenAI`: the server, the reply queue, the
    request log and the course of an answer (:meth:`handle`). Subclasses check requests as
    their API does and shape its answers."""

    base_path: ClassVar[str] = ""

    def __init__(self, api_key: str = FAKE_API_KEY) -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        """Every request received: ``method``, ``path``, ``headers`` (lowercased names) and
        ``body`` (parsed JSON, or ``None``)."""
        self.errors: list[str] = []
        """Tracebacks of bugs inside the fake itself (a test may assert it stays empty)."""
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._responder: Callable[[Any], Reply | Fail | None] | None = None
        self._service = LoopbackHTTPService(self, _Handler, name=type(self).__name__)

    # --- scripting

    def enqueue(self, *replies: Reply | Fail) -> None:
        """Queue replies, answered in order; a bare :class:`Fail` is ``Reply([fail])``. When the
        queue is empty the answer is ``Reply([Text("ok")])``."""
        wrapped = [reply if isinstance(reply, Reply) else Reply([reply]) for reply in replies]
        with self._lock:
            self._queue.extend(wrapped)

    def respond_with(self, responder: Callable[[Any], Reply | Fail | None] | None) -> None:
        """Answer by content instead of order: ``responder(body)`` gets each request's parsed
        JSON body and returns the reply, or None to fall back to the queue. For concurrent
        callers (parallel sub-agents), whose requests arrive in no fixed order."""
        with self._lock:
            self._responder = responder

    @property
    def pending(self) -> int:
        """How many queued replies have not been served yet."""
        with self._lock:
            return len(self._queue)

    def next_reply(self, body: Any = None) -> Reply:
        with self._lock:
            responder = self._responder
        if responder is not None:
            chosen = responder(body)
            if chosen is not None:
                return chosen if isinstance(chosen, Reply) else Reply([chosen])
        with self._lock:
            return self._queue.popleft() if self._queue else DEFAULT_REPLY

    def _record(self, exchange: Exchange) -> None:
        entry = {
            "method": exchange.method,
            "path": exchange.path,
            "headers": dict(exchange.headers),
            "body": exchange.body,
        }
        with self._lock:
            self.requests.append(entry)

    def handle(self, exchange: Exchange) -> None:
        """Answer one request, as the API being faked would: a request it refuses gets its error;
        otherwise the next reply is a scripted failure, a stream or a whole response, as the
        request asked."""
        body = self.accepted_body(exchange)
        if body is None:
            return
        reply = self.next_reply(body)
        if reply.fail is not None:
            self.send_fail(exchange, reply.fail)
        elif body.get("stream") is True:
            self.send_stream(exchange, reply, body)
        else:
            self.send_whole(exchange, reply, body)

    @abstractmethod
    def accepted_body(self, exchange: Exchange) -> dict[str, Any] | None:
        """The request's JSON body if the API would take the request; otherwise None, after
        answering with the API's error (wrong path, bad key, missing field)."""

    @abstractmethod
    def send_fail(self, exchange: Exchange, fail: Fail) -> None:
        """The HTTP error of a scripted :class:`Fail`, in the API's error shape."""

    @abstractmethod
    def send_stream(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        """``reply`` as the API streams it."""

    @abstractmethod
    def send_whole(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        """``reply`` as one JSON response."""

    # --- lifecycle (the rest: LoopbackFake)

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``."""
        return f"{self._service.base_url}{self.base_path}"

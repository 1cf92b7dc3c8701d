"""Scripting types shared by the wire-level LLM fakes, and the loopback HTTP server under them.

A test scripts what the "model" answers as a FIFO of :class:`Reply` objects, one per HTTP
response. A reply is a list of steps:

- :class:`Text` / :class:`Thinking`: one streamed delta each; consecutive steps of the same kind
  (possibly with a :class:`Stall` between them) extend the same content block, so
  ``[Text("Hel"), Text("lo")]`` is one text block sent as two deltas.
- :class:`ToolCall`: one tool call; its JSON arguments are streamed in a few partial pieces. A
  ``str`` argument is sent verbatim (malformed JSON included).
- :class:`Usage`: the token counts to report (its position does not matter). Without one, the fake
  reports a rough estimate (about four characters a token).
- :class:`Fail`: an HTTP error response instead of any stream; it must be the reply's only step.
- :class:`MidStreamError`, :class:`Disconnect`, :class:`Stall`: faults during the response.

Token accounting follows one convention for both APIs: ``Usage.input_tokens`` are the *uncached*
input tokens (Anthropic's meaning), ``cache_read``/``cache_write`` come on top. The Anthropic fake
reports them as ``input_tokens``/``cache_read_input_tokens``/``cache_creation_input_tokens``; the
OpenAI fake reports ``prompt_tokens = input_tokens + cache_read + cache_write`` (OpenAI counts
cached tokens inside ``prompt_tokens``) and ``prompt_tokens_details.cached_tokens = cache_read``.

``Reply.stop_reason`` may use either API's vocabulary: each fake translates the other's names
(``end_turn`` <-> ``stop``, ``max_tokens`` <-> ``length``, ``tool_use`` <-> ``tool_calls``,
``refusal`` <-> ``content_filter``) and passes unknown names through.

:class:`FakeLLMServer` is the shared plumbing: a ``ThreadingHTTPServer`` on a free 127.0.0.1 port,
HTTP/1.1 with keep-alive, ``Content-Length`` bodies for plain responses and chunked transfer
encoding for streams (so a :class:`Disconnect` is an *incomplete* body to the client, not a clean
end). ``stop()`` stops accepting, shuts down every open connection (waking any :class:`Stall`),
joins every thread and closes every socket.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import string
import sys
import threading
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = [
    "Disconnect",
    "Exchange",
    "Fail",
    "FakeLLMServer",
    "MidStreamError",
    "Reply",
    "Stall",
    "Step",
    "Text",
    "Thinking",
    "ToolCall",
    "Usage",
]


# --- scripting types -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Visible model text: one ``text_delta`` (Anthropic) / one ``delta.content`` (OpenAI)."""

    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning text. Anthropic: a ``thinking`` block (``thinking_delta``s, then a
    ``signature_delta`` before the block stops). OpenAI: see ``FakeOpenAI(reasoning_field=...)``."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call. ``arguments`` as a dict is JSON-encoded; a ``str`` is sent verbatim, so a test
    can send malformed JSON. ``id`` defaults to a fresh ``toolu_…`` / ``call_…`` id."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Usage:
    """Token counts to report. ``input_tokens`` excludes the cached ones (see module docs)."""

    input_tokens: int
    output_tokens: int
    cache_read: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class Fail:
    """An HTTP error response sent before any stream, with the error body shaped as each API shapes
    it. ``retry_after`` (seconds, may be fractional) becomes a ``retry-after`` header;
    ``should_retry`` an ``x-should-retry: true|false`` header (both SDKs obey it over the status
    code); ``code`` is OpenAI's ``error.code`` (the Anthropic fake ignores it)."""

    status: int
    error_type: str
    message: str
    retry_after: float | None = None
    code: str | None = None
    should_retry: bool | None = None


@dataclass(frozen=True)
class MidStreamError:
    """An error after the stream has started. Anthropic: an ``event: error`` SSE event, then the
    stream ends (non-streaming request: an HTTP error whose status matches ``error_type``).
    OpenAI: the connection is dropped (Chat Completions has no error event)."""

    error_type: str
    message: str


@dataclass(frozen=True)
class Disconnect:
    """Close the connection at this point, without the terminal event or the final chunk. On a
    non-streaming request: close without sending any response."""


@dataclass(frozen=True)
class Stall:
    """Send nothing for ``seconds``, keeping the connection open (cut short by ``stop()``). On a
    non-streaming request the stalls add up before the response is sent."""

    seconds: float


Step = Text | Thinking | ToolCall | Usage | Fail | MidStreamError | Disconnect | Stall
_STEP_TYPES = (Text, Thinking, ToolCall, Usage, Fail, MidStreamError, Disconnect, Stall)


@dataclass(frozen=True)
class Reply:
    """One HTTP response. ``stop_reason`` defaults to ``tool_use``/``tool_calls`` when the reply has
    a tool call, else ``end_turn``/``stop``."""

    steps: Sequence[Step]
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        for step in steps:
            if not isinstance(step, _STEP_TYPES):
                raise TypeError(f"not a script step: {step!r}")
        if any(isinstance(step, Fail) for step in steps) and len(steps) != 1:
            raise ValueError("a Fail must be the only step of its Reply")
        object.__setattr__(self, "steps", steps)

    @property
    def fail(self) -> Fail | None:
        first = self.steps[0] if self.steps else None
        return first if isinstance(first, Fail) else None

    @property
    def has_tool_calls(self) -> bool:
        return any(isinstance(step, ToolCall) for step in self.steps)

    def usage(self, request_body: dict[str, Any]) -> Usage:
        """The scripted :class:`Usage` (the last one wins), else an estimate."""
        scripted = [step for step in self.steps if isinstance(step, Usage)]
        if scripted:
            return scripted[-1]
        prompt = {key: request_body.get(key) for key in ("system", "messages", "tools")}
        produced = 0
        for step in self.steps:
            if isinstance(step, Text | Thinking):
                produced += len(step.text)
            elif isinstance(step, ToolCall):
                produced += len(step.name) + len(step.arguments_json())
        return Usage(max(1, len(json.dumps(prompt)) // 4), max(1, produced // 4))


DEFAULT_REPLY = Reply([Text("ok")])

ANTHROPIC_TO_OPENAI_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
OPENAI_TO_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a safety net only: stop() joins every thread it started

    def __init__(self, owner: FakeLLMServer) -> None:
        self.owner = owner
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self._count = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Real API servers send each SSE event at once; without this, Nagle's algorithm holds the
        # last small write for a delayed ACK (~40 ms) and every call looks that much slower.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self._count += 1
            thread = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name=f"{type(self.owner).__name__}-conn-{self._count}",
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_POST(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        raw_body = self.rfile.read(length) if length > 0 else b""
        exchange = Exchange(self, raw_body)
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

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeLLMServer(ABC):
    """Base of :class:`FakeAnthropic` and :class:`FakeOpenAI`: the server, the reply queue and the
    request log. Subclasses implement :meth:`handle`."""

    base_path: ClassVar[str] = ""

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        """Every request received: ``method``, ``path``, ``headers`` (lowercased names) and
        ``body`` (parsed JSON, or ``None``)."""
        self.errors: list[str] = []
        """Tracebacks of bugs inside the fake itself (a test may assert it stays empty)."""
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting

    def enqueue(self, *replies: Reply | Fail) -> None:
        """Queue replies, answered in order; a bare :class:`Fail` is ``Reply([fail])``. When the
        queue is empty the answer is ``Reply([Text("ok")])``."""
        wrapped = [reply if isinstance(reply, Reply) else Reply([reply]) for reply in replies]
        with self._lock:
            self._queue.extend(wrapped)

    @property
    def pending(self) -> int:
        """How many queued replies have not been served yet."""
        with self._lock:
            return len(self._queue)

    def next_reply(self) -> Reply:
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

    @abstractmethod
    def handle(self, exchange: Exchange) -> None:
        """Answer one request, as the API being faked would."""

    # --- lifecycle

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        port: int = self._httpd.server_address[1]
        return port

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``."""
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        httpd = _HTTPServer(self)
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-server",
            daemon=True,
        )
        self._httpd, self._thread = httpd, thread
        thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, drop every open connection, join every thread, close every socket."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._httpd = self._thread = None
        httpd.stopping.set()
        httpd.shutdown()
        thread.join(timeout)
        with httpd.lock:
            connections = list(httpd.connections)
            handlers = list(httpd.handler_threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for handler in handlers:
            handler.join(timeout)
        httpd.server_close()
        stuck = [t.name for t in [thread, *handlers] if t.is_alive()]
        if stuck:
            raise RuntimeError(f"{type(self).__name__}.stop(): threads still running: {stuck}")

    def __enter__(self) -> Self:
        if self._httpd is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

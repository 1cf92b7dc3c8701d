"""HTTP plumbing of the fake Bot API: a threading HTTP/1.1 server on a free loopback port.

Requests are parsed the ways the Bot API accepts parameters (query string, URL-encoded form,
JSON, multipart form with files) and handed to the owner as a :class:`Request`; the owner answers
with JSON, raw bytes or a connection reset. ``stop()`` stops accepting, wakes long polls, shuts
every open connection, joins every thread and closes every socket.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import traceback
import urllib.parse
from dataclasses import dataclass, field
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str
    content: bytes
    content_type: str = "application/octet-stream"


@dataclass
class Request:
    method: str  # HTTP method
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Upload] = field(default_factory=dict)


class Owner(Protocol):
    errors: list[str]

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes] | None:
        """``(status, headers, body)``, or ``None`` to reset the connection."""
        ...


def _decode_value(value: str) -> Any:
    """Form and multipart values are strings; objects and arrays arrive JSON-encoded."""
    stripped = value.strip()
    if stripped[:1] in {"{", "["}:
        with contextlib.suppress(ValueError):
            return json.loads(stripped)
    return value


def parse_parameters(
    query: str, content_type: str, body: bytes
) -> tuple[dict[str, Any], dict[str, Upload]]:
    params: dict[str, Any] = {
        k: _decode_value(v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
    }
    files: dict[str, Upload] = {}
    kind = content_type.split(";", 1)[0].strip().lower()
    if not body:
        return params, files
    if kind == "application/json":
        loaded = json.loads(body)
        if not isinstance(loaded, dict):
            raise ValueError("the JSON body must be an object")
        params.update(loaded)
    elif kind == "application/x-www-form-urlencoded":
        params.update(
            {
                k: _decode_value(v)
                for k, v in urllib.parse.parse_qsl(body.decode(), keep_blank_values=True)
            }
        )
    elif kind == "multipart/form-data":
        head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
        message: Message = BytesParser(policy=HTTP).parsebytes(head + body)
        for part in message.iter_parts():  # type: ignore[attr-defined]
            name = part.get_param("name", header="content-disposition")
            if not name:
                continue
            payload = part.get_payload(decode=True) or b""
            filename = part.get_filename()
            if filename is not None:
                files[str(name)] = Upload(str(filename), payload, part.get_content_type())
            else:
                params[str(name)] = _decode_value(payload.decode("utf-8"))
    return params, files


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a safety net only: stop() joins every thread it started

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self._count = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self._count += 1
            thread = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name=f"FakeTelegram-conn-{self._count}",
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
        if not isinstance(sys.exc_info()[1], OSError):
            self.owner.errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        body = self.rfile.read(length) if length > 0 else b""
        path, _, query = self.path.partition("?")
        try:
            params, files = parse_parameters(query, self.headers.get("Content-Type", ""), body)
        except (ValueError, UnicodeDecodeError) as exc:
            payload = {"ok": False, "error_code": 400, "description": f"Bad Request: {exc}"}
            self._send(400, {"Content-Type": "application/json"}, json.dumps(payload).encode())
            return
        request = Request(self.command, path, params, files)
        try:
            answer = self.server.owner.answer(request)
        except Exception:
            self.server.owner.errors.append(traceback.format_exc())
            payload = {"ok": False, "error_code": 500, "description": "fake server error"}
            self._send(500, {"Content-Type": "application/json"}, json.dumps(payload).encode())
            return
        if answer is None:
            self._reset()
            return
        self._send(*answer)

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True

    def _reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0), as a crashed peer would."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackServer:
    """Owns the listening socket and the threads; :meth:`stop` joins them all."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake Telegram server is not started")
        port: int = self._httpd.server_address[1]
        return port

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("the fake Telegram server is already started")
        self._httpd = _HTTPServer(self._owner)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeTelegram-server",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._httpd = self._thread = None
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
            raise RuntimeError(f"FakeTelegram.stop(): threads still running: {stuck}")

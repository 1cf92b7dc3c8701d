"""HTTP plumbing of the fake Bot API: an HTTP/1.1 handler on the shared loopback server, and the
Bot API's JSON envelope.

Requests are parsed the ways the Bot API accepts parameters (query string, URL-encoded form,
JSON, multipart form with files) and handed to the owner as a :class:`Request`; the owner answers
with an :data:`Answer`: JSON (:func:`ok`, :func:`error`), raw bytes or a connection reset. The
server itself (free 127.0.0.1 port, clean start and stop) is
:mod:`iris_runtime.testing.loopback_http`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import traceback
import urllib.parse
from dataclasses import dataclass, field
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Protocol

from iris_runtime.testing.loopback_http import (
    LoopbackHandler,
    LoopbackHTTPService,
    TrackingHTTPServer,
)

Answer = tuple[int, dict[str, str], bytes] | None
"""``(status, headers, body)``, or ``None`` to reset the connection."""

_JSON = {"Content-Type": "application/json"}


class ApiError(Exception):
    """An error answer, raised where it is found: :func:`error` makes the envelope."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


def ok(result: Any) -> tuple[int, dict[str, str], bytes]:
    """``{"ok": true, "result": ...}``."""
    return 200, dict(_JSON), json.dumps({"ok": True, "result": result}).encode()


def error(
    status: int, description: str, retry_after: int | None = None
) -> tuple[int, dict[str, str], bytes]:
    """``{"ok": false, "error_code": ..., "description": ...}``, with flood control's
    ``parameters.retry_after`` when given."""
    payload: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        payload["parameters"] = {"retry_after": retry_after}
    return status, dict(_JSON), json.dumps(payload).encode()


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

    def answer(self, request: Request) -> Answer: ...


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


class _Handler(LoopbackHandler):
    server: TrackingHTTPServer[Owner]

    def dispatch(self) -> None:
        body = self.read_body()
        path, _, query = self.path.partition("?")
        try:
            params, files = parse_parameters(query, self.headers.get("Content-Type", ""), body)
        except (ValueError, UnicodeDecodeError) as exc:
            self._send(*error(400, f"Bad Request: {exc}"))
            return
        request = Request(self.command, path, params, files)
        try:
            answer = self.server.owner.answer(request)
        except Exception:
            self.server.owner.errors.append(traceback.format_exc())
            self._send(*error(500, "fake server error"))
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


class LoopbackServer(LoopbackHTTPService[Owner]):
    """Owns the listening socket and the threads; :meth:`stop` joins them all."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(owner, _Handler, name="FakeTelegram", label="the fake Telegram server")

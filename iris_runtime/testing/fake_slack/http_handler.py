"""The fake Slack's HTTP request handler: reads a request, routes it by path, writes the answer.

- ``/link/?ticket=…`` — the Socket Mode WebSocket upgrade;
- ``/api/<method>`` — a Web API call, its parameters merged from the query string and a form or
  JSON body;
- ``/upload/v1/<file id>`` (POST) — an upload URL of ``files.getUploadURLExternal``;
- ``/files-pri/<file id>/<name>`` (GET) — a file download (``url_private``).

What each route means is the owner's business (:class:`Routes`, i.e. ``FakeSlack``). A route that
must end without an answer raises :class:`Abort`: the connection is shut down, and the client
sees a network error. Any other exception is a bug in the fake: its traceback goes to
``owner.errors`` and the client gets a 500.
"""

from __future__ import annotations

import contextlib
import json
import socket
import traceback
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from iris_runtime.testing.loopback_http import ErrorSink, LoopbackHandler, TrackingHTTPServer


class Abort(Exception):
    """Unwinds a request whose connection must be dropped."""


class Routes(ErrorSink, Protocol):
    """What the handler hands each request to."""

    def socket_request(self, handler: SlackHandler, query: dict[str, str]) -> None: ...

    def api_request(self, handler: SlackHandler, method: str, params: dict[str, Any]) -> None: ...

    def upload_request(self, handler: SlackHandler, file_id: str, body: bytes) -> None: ...

    def download_request(self, handler: SlackHandler, file_id: str) -> None: ...


class SlackHandler(LoopbackHandler):
    server: TrackingHTTPServer[Routes]

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_plain(status, body, {"Content-Type": "application/json", **(headers or {})})

    def send_plain(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "text/plain", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def dispatch(self) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        path = parts.path
        try:
            if path.startswith("/link"):
                owner.socket_request(self, query)
                return
            body = self.read_body()
            if path.startswith("/api/"):
                params: dict[str, Any] = dict(query)
                kind = self.headers.get("Content-Type", "")
                if body and kind.startswith("application/json"):
                    parsed = json.loads(body)
                    if isinstance(parsed, dict):
                        params.update(parsed)
                elif body:
                    params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
                owner.api_request(self, path[len("/api/") :], params)
            elif path.startswith("/upload/v1/") and self.command == "POST":
                owner.upload_request(self, path.rsplit("/", 1)[-1], body)
            elif path.startswith("/files-pri/") and self.command == "GET":
                owner.download_request(self, path.split("/")[2])
            else:
                self.send_plain(404, b"not found")
        except Abort:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (OSError, EOFError):
            self.close_connection = True
        except Exception:
            owner.errors.append(traceback.format_exc())
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.send_json(500, {"ok": False, "error": "fake_server_error"})

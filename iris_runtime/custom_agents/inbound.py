"""Iris as a relay agent for another host (``IRIS_RELAY_INBOUND_PORT``), so one Iris can sit
behind another.

The host POSTs each turn here (relay contract v1) and Iris answers at once; the turn then runs as
a conversation of her session API (``SESSION-relay-<chat_id>``), and its tool cards and its reply
go back through the host's reach socket (``IRIS_UPSTREAM_REACH_SOCKET``, or the spec's
``WIRELING_REACH_SOCK``). While the run goes on an empty ``turn.delta`` keeps the host's silence
clock from running out. A ``stop`` POST for the turn being run stops that conversation's run.
Without an upstream socket a turn is refused with 503: there would be nowhere to reply.

The contract has no credential, so the listener guards itself the way a loopback service must
against the browsers on the same machine: it listens on 127.0.0.1 only, at a secret random path
(kept in ``<data>/custom-agents/relay-inbound-url``, the URL to put in the host's manifest),
answers only requests whose Host is ``127.0.0.1:<port>`` or ``localhost:<port>`` (no DNS
rebinding) and that carry no Origin, and takes only ``application/json`` (which a page's
``no-cors`` fetch cannot send).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from iris_runtime.custom_agents.reach_client import ReachConnection, ReachError
from iris_runtime.custom_agents.service import CustomAgents
from iris_runtime.data_layout import CUSTOM_AGENTS_DIR
from iris_runtime.engine.channels import session_channel
from iris_runtime.engine.observers import ObserverEvent
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.errors import IrisError
from iris_runtime.private_files import private_dir, write_private_file

log = logging.getLogger(__name__)


URL_FILE = "relay-inbound-url"  # in <data>/custom-agents: the URL to give the host (0600)
HEARTBEAT_MAX_SECONDS = 60.0


class RelayInbound:
    def __init__(self, agents: CustomAgents, port: int) -> None:
        self._agents = agents
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        self.port = self._server.server_port
        self.secret_path = _secret_path(agents.engine.settings.data_dir, self.port)
        self.url = f"http://127.0.0.1:{self.port}{self.secret_path}"
        self._running: dict[str, str] = {}  # channel -> the turn it is running for the host
        self._lock = threading.Lock()
        silence = agents.config.silence_seconds
        # Something reaches the host at least this often while a run goes on, so a long run is
        # not taken for silence (the host's silence setting is assumed to be like this one's).
        self.heartbeat_seconds = max(0.05, min(HEARTBEAT_MAX_SECONDS, silence / 5))

    def start(self) -> None:
        threading.Thread(
            target=self._server.serve_forever, name="relay inbound", daemon=True
        ).start()
        log.info("answering as a relay agent on %s (the host's manifest names this URL)", self.url)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def take(self, message: dict[str, Any]) -> tuple[int, str | None]:
        """Act on one POSTed message: ``(HTTP status, error or None)``."""
        kind, chat_id = message.get("type"), message.get("chat_id")
        if kind not in {"message", "stop"}:
            return 200, None  # the contract: an unknown type is accepted and ignored
        if not isinstance(chat_id, str) or not _safe(chat_id):
            return 400, '"chat_id" must be a UUID'
        channel = session_channel(f"relay-{chat_id}")
        turn_id = message.get("turn_id")
        if kind == "stop":
            with self._lock:
                current = self._running.get(channel)
            if isinstance(turn_id, str) and turn_id == current:  # a stale stop stops nothing
                self._agents.engine.handle_stop(channel)
            return 200, None
        text = message.get("text")
        if not isinstance(turn_id, str) or not isinstance(text, str):
            return 400, '"turn_id" and "text" must be strings'
        upstream = self._agents.config.upstream_reach_socket
        if upstream is None:
            return 503, "this Iris has no host to reply to: set IRIS_UPSTREAM_REACH_SOCKET"
        with self._lock:
            self._running[channel] = turn_id
        threading.Thread(
            target=self._answer, args=(upstream, channel, turn_id, text), daemon=True
        ).start()
        return 200, None

    def _answer(self, upstream: Path, channel: str, turn_id: str, text: str) -> None:
        engine = self._agents.engine
        conn = _Upstream(upstream)
        finished = threading.Event()

        def forward(event: ObserverEvent) -> None:
            if event.get("type") == "tool":
                conn.send("turn.tool", turn_id=turn_id, **_tool_fields(event))

        def heartbeat() -> None:
            while not finished.wait(self.heartbeat_seconds):
                answer = conn.send("turn.delta", turn_id=turn_id, text="")
                if answer == {"error": "no such turn"} and not finished.is_set():
                    engine.handle_stop(channel)  # the host gave up on the turn: so do we
                    return

        token = engine.observers.register(channel, forward)
        threading.Thread(target=heartbeat, name=f"relay heartbeat {turn_id}", daemon=True).start()
        try:
            owner = engine.transports.session_owner(channel)
            ticket = owner.inject_session_message(TransportEvent(channel, text, "relay"))
            result = ticket.wait()
        except IrisError as exc:
            log.error("relay turn %s could not be run: %s", turn_id, exc)
            result = None
        finally:
            finished.set()
            engine.observers.unregister(channel, token)
            with self._lock:
                if self._running.get(channel) == turn_id:
                    del self._running[channel]
        if result is not None and result.text:
            conn.send("turn.delta", turn_id=turn_id, text=result.text)
        conn.send("turn.done", turn_id=turn_id)
        conn.close()


class _Upstream:
    """The host's reach socket for one turn: connected on first use, reconnected once when a
    request fails (the host restarted, or closed an idle connection); never raises."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: ReachConnection | None = None
        self._lock = threading.Lock()

    def send(self, op: str, **fields: Any) -> dict[str, Any] | None:
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = ReachConnection(self._path)
                    return self._conn.request(op, **fields)
                except (ReachError, ValueError) as exc:
                    self._drop()
                    if attempt == 2:
                        log.error("relay %s could not reach the host: %s", op, exc)
            return None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


def _secret_path(data_dir: Path, port: int) -> str:
    """The listener's path, kept across restarts with the URL it makes: a page in a browser on
    this machine can reach the port, but cannot guess the path."""
    directory = data_dir / CUSTOM_AGENTS_DIR
    url_file = directory / URL_FILE
    path = ""
    with contextlib.suppress(OSError, ValueError):
        path = urllib.parse.urlsplit(url_file.read_text().strip()).path
    if len(path) < 20:
        path = "/" + secrets.token_urlsafe(24)
    private_dir(directory)
    write_private_file(url_file, f"http://127.0.0.1:{port}{path}\n".encode())
    return path


def _tool_fields(event: ObserverEvent) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "id": str(event.get("id")),
        "kind": event.get("kind", "other"),
        "title": event.get("name", ""),
    }
    if event.get("phase") == "start":
        fields["input"] = event.get("args") or {}
    else:
        fields["output"] = event.get("result") or ""
    return fields


def _safe(value: str) -> bool:
    return 0 < len(value) <= 64 and all(c.isalnum() or c in "-_" for c in value)


def _handler_for(inbound: RelayInbound) -> type[BaseHTTPRequestHandler]:
    max_bytes = inbound._agents.engine.settings.max_body_bytes

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            # Only the host, never a web page: a page's request names another Host (DNS
            # rebinding) or carries an Origin; a no-cors fetch cannot send application/json.
            hosts = {f"127.0.0.1:{inbound.port}", f"localhost:{inbound.port}"}
            if self.headers.get("Host", "").lower() not in hosts or "Origin" in self.headers:
                self._reply(403, {"error": "only a relay host on this machine may post here"})
                return
            if self.path != inbound.secret_path:
                self._reply(404, {"error": "not found"})
                return
            content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if content_type != "application/json":
                self._reply(415, {"error": "send application/json"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self._reply(400, {"error": "send a Content-Length"})
                return
            if length > max_bytes:
                self._reply(413, {"error": f"the body is larger than {max_bytes} bytes"})
                return
            try:
                message = json.loads(self.rfile.read(length))
            except (ValueError, RecursionError):
                self._reply(400, {"error": "the body must be a JSON object"})
                return
            if not isinstance(message, dict):
                self._reply(400, {"error": "the body must be a JSON object"})
                return
            status, problem = inbound.take(message)
            self._reply(status, {"error": problem} if problem else {})

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("relay inbound: " + format, *args)

    return Handler

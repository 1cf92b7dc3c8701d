"""Iris as a relay agent for another host (``IRIS_RELAY_INBOUND_PORT``), so one Iris can sit
behind another.

The host POSTs each turn here (relay contract v1) and Iris answers at once; the turn then runs as
a conversation of her session API (``SESSION-relay-<chat_id>``), and its tool cards and its reply
go back through the host's reach socket (``IRIS_UPSTREAM_REACH_SOCKET``, or the spec's
``WIRELING_REACH_SOCK``). A ``stop`` POST stops that conversation's run.

The listener is loopback only and, like every relay agent's, takes no credential: the contract
has none, and the host's reach socket is the only place replies can go.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from iris_runtime.custom_agents.reach_client import ReachConnection, ReachError
from iris_runtime.custom_agents.service import CustomAgents
from iris_runtime.engine.channels import session_channel
from iris_runtime.engine.observers import ObserverEvent
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)


class RelayInbound:
    def __init__(self, agents: CustomAgents, port: int) -> None:
        self._agents = agents
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True

    def start(self) -> None:
        threading.Thread(
            target=self._server.serve_forever, name="relay inbound", daemon=True
        ).start()
        log.info("answering as a relay agent on http://127.0.0.1:%d/", self._server.server_port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def take(self, message: dict[str, Any]) -> str | None:
        """Act on one POSTed message; returns an error for a 400, or None when accepted."""
        kind, chat_id = message.get("type"), message.get("chat_id")
        if kind not in {"message", "stop"}:
            return None  # the contract: an unknown type is accepted and ignored
        if not isinstance(chat_id, str) or not _safe(chat_id):
            return '"chat_id" must be a UUID'
        channel = session_channel(f"relay-{chat_id}")
        if kind == "stop":
            self._agents.engine.handle_stop(channel)
            return None
        turn_id, text = message.get("turn_id"), message.get("text")
        if not isinstance(turn_id, str) or not isinstance(text, str):
            return '"turn_id" and "text" must be strings'
        threading.Thread(target=self._answer, args=(channel, turn_id, text), daemon=True).start()
        return None

    def _answer(self, channel: str, turn_id: str, text: str) -> None:
        upstream = self._agents.config.upstream_reach_socket
        if upstream is None:
            log.error("a relay turn arrived but IRIS_UPSTREAM_REACH_SOCKET is not set")
            return
        engine = self._agents.engine
        try:
            with ReachConnection(upstream) as conn:
                lock = threading.Lock()

                def forward(event: ObserverEvent) -> None:
                    if event.get("type") == "tool":
                        fields = _tool_fields(event)
                        with lock:
                            conn.request("turn.tool", turn_id=turn_id, **fields)

                token = engine.observers.register(channel, forward)
                try:
                    owner = engine.transports.session_owner(channel)
                    ticket = owner.inject_session_message(TransportEvent(channel, text, "relay"))
                    result = ticket.wait()
                finally:
                    engine.observers.unregister(channel, token)
                with lock:
                    if result.text:
                        conn.request("turn.delta", turn_id=turn_id, text=result.text)
                    conn.request("turn.done", turn_id=turn_id)
        except (ReachError, IrisError) as exc:
            log.error("relay turn %s could not be answered: %s", turn_id, exc)


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
            problem = inbound.take(message)
            self._reply(400 if problem else 200, {"error": problem} if problem else {})

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

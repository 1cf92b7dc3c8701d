"""The Web UI's WebSocket: ``/ws?session=<id>[&agent=<name>]``, one per open conversation.

The cookie and the Origin are checked before the upgrade (and the conversation must exist); the
first frame must then be ``{"type": "hello", "page_key": …}`` with the session's page key. After
``ready``, the browser sends ``message``, ``stop`` and ``ping`` frames; everything the run says
comes back through the transport's hub (:mod:`iris_webui.hub`).
"""

from __future__ import annotations

import json
from typing import Any, cast

from flask import Flask, Response, g, request
from flask.blueprints import BlueprintSetupState
from flask_sock import Sock  # type: ignore[import-untyped]

from iris_runtime.agents.registry import registry_for
from iris_runtime.custom_agents.router import is_custom_agent
from iris_runtime.errors import EngineStopping, IrisError
from iris_runtime.web.capacity import STREAMS
from iris_runtime.web.errors import error_response
from iris_runtime.web.slots import hold
from iris_webui.auth import session_digest
from iris_webui.blueprint import (
    blueprint,
    existing_channel,
    is_text,
    logged_in,
    page_key_ok,
    same_origin,
    session_cookie,
    web_transport,
)
from iris_webui.hub import MESSAGE_TOO_BIG, POLICY_VIOLATION, Client, ReaderThread, WakeEvent
from iris_webui.transport import WebTransport
from iris_webui.uploads import channel_of

MAX_FRAME_BYTES = 64 * 1024  # from the browser; larger gets frame_too_large and close 1009
MAX_TEXT_CHARS = 32 * 1024
MAX_FILES_PER_MESSAGE = 20
MAX_AGENT_CHARS = 64  # agent names are at most 63; a longer ?agent= is unknown anyway
HARD_FRAME_LIMIT = 1024 * 1024  # simple-websocket drops the connection itself beyond this
PING_SECONDS = 25.0  # keeps idle sockets alive through proxies and finds dead browsers
HELLO_SECONDS = 10.0  # for a new socket's first frame, the hello with the page key

sock = Sock()


@blueprint.record_once
def _configure(state: BlueprintSetupState) -> None:
    app = cast(Flask, state.app)
    app.config["SOCK_SERVER_OPTIONS"] = {
        "ping_interval": PING_SECONDS,
        "max_message_size": HARD_FRAME_LIMIT,
        "event_class": WakeEvent,  # lets one thread wait for both directions (see hub)
        "thread_class": ReaderThread,
    }


@blueprint.before_app_request
def _guard_websocket() -> Response | None:
    """Refuse a socket before it is upgraded: no valid cookie, another Origin, a bad session."""
    if request.path != "/ws":
        return None
    if not logged_in():
        return error_response("log in first", "unauthorized", 401)
    if not same_origin():
        return error_response("cross-origin WebSocket refused", "bad_origin", 403)
    try:
        existing_channel(request.args.get("session", ""))
    except IrisError as exc:
        return error_response(exc.message, exc.code, exc.status)
    # Each open socket holds a server thread for its whole life: it takes one of the process's
    # stream slots (503 with Retry-After when none is left), given back when the socket's request
    # ends, so pages, the API and /health always keep threads of their own.
    g.iris_stream_slot = hold(STREAMS)
    return None


@blueprint.teardown_app_request
def _release_stream_slot(_exc: BaseException | None) -> None:
    slot = g.pop("iris_stream_slot", None)
    if slot is not None:
        slot.release()


@sock.route("/ws", bp=blueprint)  # type: ignore[untyped-decorator]
def websocket(ws: Any) -> None:
    transport = web_transport()
    session = request.args["session"]
    agent = (request.args.get("agent") or "").strip().lower()[:MAX_AGENT_CHARS] or None
    if not _hello(ws):
        return
    client = Client(ws, channel_of(session), agent, session_digest(session_cookie() or ""))
    if not transport.hub.add(client):
        ws.close(reason=1001, message="Iris is restarting")
        return
    try:
        client.send(
            {
                "type": "ready",
                "session": session,
                "agent": agent,
                "running": transport.engine.is_running(client.channel),
            }
        )
        if agent is not None and not _registered(transport, agent):
            client.accepts_messages = False
            client.send(_unknown_agent(agent))
        client.serve(lambda c, data: _on_frame(transport, c, data))
    finally:
        transport.hub.remove(client)


def _hello(ws: Any) -> bool:
    """The socket's first frame must be ``{"type": "hello", "page_key": …}`` with the session's
    page key, within ``HELLO_SECONDS``; anything else closes it (1008) before ``ready``."""
    from simple_websocket import ConnectionClosed  # type: ignore[import-untyped]

    try:
        data = ws.receive(timeout=HELLO_SECONDS)
    except ConnectionClosed:
        return False
    frame = _parse(data)
    key = frame.get("page_key") if frame is not None and frame.get("type") == "hello" else None
    if isinstance(key, str) and page_key_ok(key):
        return True
    refusal = _error("page_key_required", "send a hello frame with this page's key first")
    try:
        ws.send(json.dumps(refusal))
        ws.close(reason=POLICY_VIOLATION, message="page key required")
    except ConnectionClosed:
        pass
    return False


def _parse(data: Any) -> dict[str, Any] | None:
    """A client frame as a JSON object, or None (not text, too big, not JSON, too deep)."""
    if not isinstance(data, str) or len(data) > MAX_FRAME_BYTES:
        return None
    try:
        frame = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return frame if isinstance(frame, dict) else None


def _registered(transport: WebTransport, agent: str) -> bool:
    if is_custom_agent(transport.engine, agent):
        return True
    try:
        return agent in registry_for(transport.engine.settings).names()
    except IrisError:
        return False


def _unknown_agent(agent: str) -> dict[str, str]:
    return {
        "type": "error",
        "code": "unknown_agent",
        "message": f"no sub-agent named {agent[:64]!r} is registered; pick another one",
    }


def _error(code: str, message: str) -> dict[str, str]:
    return {"type": "error", "code": code, "message": message}


def _on_frame(transport: WebTransport, client: Client, data: Any) -> None:
    if not isinstance(data, str):
        client.send(_error("invalid_frame", "send JSON text frames"))
        return
    if len(data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
        client.send(_error("frame_too_large", f"a frame may hold at most {MAX_FRAME_BYTES} bytes"))
        client.close(MESSAGE_TOO_BIG, "frame too large")
        return
    try:
        frame = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…" a few thousand deep
        frame = None
    if not isinstance(frame, dict):
        client.send(_error("invalid_frame", "a frame is a JSON object with a 'type'"))
        return
    kind = frame.get("type")
    if kind == "message":
        _on_message(transport, client, frame)
    elif kind == "stop":
        transport.stop_run(client.channel)
    elif kind == "ping":
        client.send({"type": "pong"})
    else:
        client.send(_error("invalid_frame", f"unknown frame type {str(kind)[:40]!r}"))


def _on_message(transport: WebTransport, client: Client, frame: dict[str, Any]) -> None:
    if not client.accepts_messages:
        client.send(_unknown_agent(client.agent or ""))
        return
    text = frame.get("text", "")
    files = frame.get("files") or []
    if not isinstance(text, str) or not isinstance(files, list):
        client.send(_error("invalid_frame", "'text' is a string and 'files' a list of paths"))
        return
    if not is_text(text) or not all(isinstance(f, str) and is_text(f) for f in files):
        # A lone surrogate ("\ud800" in the JSON) cannot be sent on to any socket or model.
        client.send(_error("invalid_frame", "the message is not valid Unicode text"))
        return
    if len(text) > MAX_TEXT_CHARS:
        client.send(_error("message_too_long", f"a message may hold {MAX_TEXT_CHARS} characters"))
        return
    if len(files) > MAX_FILES_PER_MESSAGE or not all(isinstance(f, str) for f in files):
        client.send(_error("invalid_frame", f"at most {MAX_FILES_PER_MESSAGE} file paths"))
        return
    if not text.strip() and not files:
        client.send(_error("invalid_frame", "the message is empty"))
        return
    try:
        transport.submit_message(client, text, files)
    except EngineStopping as exc:
        client.send(_error("shutting_down", exc.message))
    except IrisError as exc:
        client.send(_error(exc.code, exc.message))

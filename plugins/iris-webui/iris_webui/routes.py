"""The Web UI's HTTP routes and its WebSocket (served on ``IRIS_WEBUI_PORT``).

Pages: ``/`` (the chat, once logged in), ``/login`` (the page; ``?key=`` exchanges a one-time
key for a session cookie), ``POST /login`` (the password), ``POST /logout``, ``/static/…``.
JSON under ``/api/`` needs the session cookie and the session's page key (header
``X-Iris-Page-Key``); calls that change something also need the page's own ``Origin`` and a JSON
or multipart body (a cross-site form can send neither). The WebSocket
``/ws?session=<id>[&agent=<name>]`` checks the cookie and the Origin before upgrading, and then
wants ``{"type": "hello", "page_key": …}`` as its first frame. The cookie alone opens only the
static pages: browsers send 127.0.0.1's cookies to every port on it (see ``auth``).

Every request must name the Web UI by a Host it knows (loopback names and ``IRIS_API_HOST`` with
the Web UI's port, plus ``IRIS_WEBUI_ALLOWED_HOSTS``): a DNS-rebinding page, whose Host is its
own domain, gets 421 before any route runs.

Every response carries a strict Content-Security-Policy (no inline script or style), and
``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer`` (a login link's key never leaves in
a Referer) and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    g,
    jsonify,
    redirect,
    request,
    send_file,
    send_from_directory,
)
from flask.blueprints import BlueprintSetupState
from flask_sock import Sock  # type: ignore[import-untyped]

from iris_runtime.agents.registry import registry_for
from iris_runtime.custom_agents.router import is_custom_agent, picker_entries
from iris_runtime.engine.channels import resolve_channel_dir
from iris_runtime.errors import EngineStopping, IrisError, NotFound
from iris_runtime.web.capacity import STREAMS
from iris_runtime.web.errors import error_response
from iris_runtime.web.slots import hold
from iris_webui.auth import COOKIE_NAME, SESSION_TTL, consume_login_key, session_digest
from iris_webui.history import conversation, list_sessions
from iris_webui.hub import MESSAGE_TOO_BIG, POLICY_VIOLATION, Client, ReaderThread, WakeEvent
from iris_webui.transport import WebTransport
from iris_webui.uploads import attachment_name, channel_of, resolve_served, save_upload

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_FRAME_BYTES = 64 * 1024  # from the browser; larger gets frame_too_large and close 1009
MAX_TEXT_CHARS = 32 * 1024
MAX_FILES_PER_MESSAGE = 20
MAX_AGENT_CHARS = 64  # agent names are at most 63; a longer ?agent= is unknown anyway
HARD_FRAME_LIMIT = 1024 * 1024  # simple-websocket drops the connection itself beyond this
PING_SECONDS = 25.0  # keeps idle sockets alive through proxies and finds dead browsers
HELLO_SECONDS = 10.0  # for a new socket's first frame, the hello with the page key
PAGE_KEY_HEADER = "X-Iris-Page-Key"
UPLOAD_OVERHEAD = 64 * 1024  # multipart framing around the file
DRAIN_LIMIT = 64 * 1024 * 1024  # of a refused upload, read and dropped to keep the connection
INLINE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

blueprint = Blueprint("webui", __name__, static_folder="static", static_url_path="/static")
sock = Sock()

F = TypeVar("F", bound=Callable[..., Any])


@blueprint.record_once
def _configure(state: BlueprintSetupState) -> None:
    app = cast(Flask, state.app)
    app.config["SOCK_SERVER_OPTIONS"] = {
        "ping_interval": PING_SECONDS,
        "max_message_size": HARD_FRAME_LIMIT,
        "event_class": WakeEvent,  # lets one thread wait for both directions (see hub)
        "thread_class": ReaderThread,
    }


@blueprint.after_app_request
def _security_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    if request.path.startswith(("/api/", "/login")) or request.path == "/":
        response.headers["Cache-Control"] = "no-store"
    return response


# -- who is asking -------------------------------------------------------------------------------


def _transport() -> WebTransport:
    runtime = current_app.extensions["iris"]
    transport = runtime.engine.transports.get("webui")
    assert isinstance(transport, WebTransport)
    return transport


def _session_cookie() -> str | None:
    return request.cookies.get(COOKIE_NAME)


def _logged_in() -> bool:
    """The cookie is a live session's: enough for the static pages, nothing else."""
    return _transport().logins.valid(_session_cookie())


def _page_key_ok(page_key: str | None) -> bool:
    return _transport().logins.authorised(_session_cookie(), page_key)


def _own_origin() -> str:
    return f"{request.scheme}://{request.host}"


def _same_origin() -> bool:
    return request.headers.get("Origin") == _own_origin()


def _client_address() -> str:
    return str(request.remote_addr or "?")


def api(*, changes: bool = False) -> Callable[[F], F]:
    """A JSON route: the session cookie, and for ``changes`` the page's own Origin and a body a
    cross-site form cannot send (JSON or multipart)."""

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _logged_in():
                return error_response("log in first", "unauthorized", 401)
            if not _page_key_ok(request.headers.get(PAGE_KEY_HEADER)):
                return error_response(
                    "this page has no key for the session; log in again", "page_key_required", 401
                )
            if changes:
                if not _same_origin():
                    return error_response("cross-origin request refused", "bad_origin", 403)
                kind = request.mimetype
                if kind not in {"application/json", "multipart/form-data"}:
                    return error_response(
                        "send JSON or multipart/form-data", "unsupported_media_type", 415
                    )
            return view(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


@blueprint.before_app_request
def _guard_host() -> Response | None:
    """DNS rebinding: a foreign page whose domain now resolves to 127.0.0.1 is same-origin with
    itself, and its requests name its own domain in Host. Only our own names are answered."""
    if request.host.lower() in _transport().config.allowed_hosts:
        return None
    return error_response(
        "unknown Host; add it to IRIS_WEBUI_ALLOWED_HOSTS to use it", "misdirected_request", 421
    )


@blueprint.before_app_request
def _guard_websocket() -> Response | None:
    """Refuse a socket before it is upgraded: no valid cookie, another Origin, a bad session."""
    if request.path != "/ws":
        return None
    if not _logged_in():
        return error_response("log in first", "unauthorized", 401)
    if not _same_origin():
        return error_response("cross-origin WebSocket refused", "bad_origin", 403)
    try:
        _existing(request.args.get("session", ""))
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


# -- pages ---------------------------------------------------------------------------------------


def _page(name: str) -> Response:
    response = send_from_directory(STATIC, name, max_age=0)
    response.headers["Cache-Control"] = "no-store"
    return response


def _to_login(error: str | None = None) -> Response:
    return cast(Response, redirect("/login" + (f"?error={error}" if error else ""), code=303))


def _logged_in_response(page_key_target: Callable[[str], Response]) -> Response:
    """A new session: its cookie on the answer ``page_key_target`` makes with its page key."""
    token, page_key = _transport().logins.create()
    target = page_key_target(page_key)
    target.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(SESSION_TTL),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.is_secure,
    )
    return target


@blueprint.get("/")
def index() -> Response:
    if not _logged_in():
        return _to_login()
    return _page("index.html")


@blueprint.get("/login")
def login_page() -> Response:
    key = request.args.get("key")
    if key is None:
        # Always the page, even with a live cookie: a page that lost its page key is sent here
        # (401 page_key_required) and needs a new login; sending it home would loop.
        return _page("login.html")
    problem = consume_login_key(_transport().config.data_dir, key)
    if problem is not None:
        log.warning("a Web UI login link was refused (%s)", problem)
        return _to_login(problem)
    return _logged_in_response(_home_with_key)


def _home_with_key(page_key: str) -> Response:
    # In the fragment: never sent to any server, never in a Referer; the page moves it into
    # localStorage and strips it from the address bar.
    return cast(Response, redirect(f"/#k={page_key}", code=303))


@blueprint.get("/login/options")
def login_options() -> Response:
    return jsonify({"password": _transport().password.enabled, "logged_in": _logged_in()})


@blueprint.post("/login")
def login_password() -> Response | tuple[Response, int]:
    wants_json = request.is_json

    def refuse(message: str, code: str, status: int) -> Response:
        return error_response(message, code, status) if wants_json else _to_login(code)

    if not _same_origin():
        return error_response("cross-origin request refused", "bad_origin", 403)
    gate = _transport().password
    if not gate.enabled:
        return refuse("password login is off (IRIS_WEBUI_PASSWORD)", "password_disabled", 400)
    address = _client_address()
    try:
        body = request.get_json(silent=True) if wants_json else None
    except RecursionError:  # "[[[[…" thousands deep; Flask's silent only covers ValueError
        body = None
    candidate = body.get("password") if isinstance(body, dict) else None
    if not wants_json:
        candidate = request.form.get("password")
    if not isinstance(candidate, str) or not _is_text(candidate):
        # e.g. a lone surrogate escaped in JSON ("\ud800"): no password is that
        return refuse("the password must be text", "invalid_password", 400)
    problem = gate.attempt(address, candidate)
    if problem == "rate_limited":
        return refuse("too many wrong passwords; wait a minute", "rate_limited", 429)
    if problem is not None:
        log.warning("a wrong Web UI password from %s", address)
        return refuse("wrong password", "invalid_password", 401)
    if wants_json:
        return _logged_in_response(lambda key: jsonify({"ok": True, "page_key": key}))
    return _logged_in_response(_home_with_key)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@blueprint.post("/logout")
def logout() -> Response:
    if not _same_origin():
        return error_response("cross-origin request refused", "bad_origin", 403)
    transport = _transport()
    cookie = _session_cookie()
    if transport.logins.valid(cookie):
        assert cookie is not None
        transport.logins.revoke(cookie)
        # Its open sockets were let in by the session that just ended: they end too.
        transport.hub.close_login(session_digest(cookie))
    response = jsonify({"ok": True}) if request.is_json else _to_login("signed_out")
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="Strict")
    return response


# -- JSON API ------------------------------------------------------------------------------------


@blueprint.get("/api/sessions")
@api()
def sessions_list() -> Response:
    return jsonify(list_sessions(_transport().config.data_dir))


@blueprint.post("/api/sessions")
@api(changes=True)
def sessions_create() -> tuple[Response, int]:
    transport = _transport()
    session = secrets.token_urlsafe(12)
    resolve_channel_dir(transport.config.data_dir, channel_of(session), create=True)
    return jsonify({"id": session}), 201


def _existing(session: str) -> str:
    """The channel of a conversation that exists (made by POST /api/sessions or a message)."""
    channel = channel_of(session)
    if not (_transport().config.data_dir / channel).is_dir():
        raise NotFound(f"no conversation {session!r}", code="unknown_session")
    return channel


@blueprint.get("/api/sessions/<session>/history")
@api()
def sessions_history(session: str) -> Response:
    channel = _existing(session)
    transport = _transport()
    running = transport.engine.is_running(channel)
    messages = conversation(transport.engine.sessions, channel, running=running)
    return jsonify({"id": session, "messages": messages})


@blueprint.get("/api/agents")
@api()
def agents() -> Response:
    engine = _transport().engine
    names = registry_for(engine.settings).names()
    listed: list[dict[str, Any]] = [{"name": name} for name in sorted(names)]
    # Custom agents (spec 004) join the same list: name, label and readiness, never URLs.
    return jsonify(listed + picker_entries(engine))


@blueprint.post("/api/sessions/<session>/uploads")
@api(changes=True)
def upload(session: str) -> tuple[Response, int] | Response:
    transport = _transport()
    channel = _existing(session)
    limit = transport.config.max_upload_bytes
    declared = request.content_length
    if declared is not None and declared > limit + UPLOAD_OVERHEAD:
        _drain(declared)
        return error_response(f"the file is larger than {limit} bytes", "payload_too_large", 413)
    request.max_content_length = limit + UPLOAD_OVERHEAD  # a body longer than declared: 413
    file = request.files.get("file")
    if file is None or not file.filename:
        return error_response("send the file in the multipart field 'file'", "missing_file", 400)
    saved = save_upload(transport.config.data_dir, channel, file.stream, file.filename, limit)
    return jsonify(saved), 201


def _drain(declared: int) -> None:
    """Read and drop a refused body (up to ``DRAIN_LIMIT``) before answering. gunicorn drains
    only 64 KiB of an unread body and then closes the kept-alive connection under the browser,
    whose next request on it would fail; a bigger body than the cap is cut off all the same."""
    stream = request.environ.get("wsgi.input")
    left = min(declared, DRAIN_LIMIT)
    while stream is not None and left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        left -= len(chunk)


@blueprint.get("/api/sessions/<session>/files/<path:relative>")
@api()
def download(session: str, relative: str) -> Response:
    path = resolve_served(_transport().config.data_dir, channel_of(session), relative)
    response = send_file(
        path,
        mimetype=INLINE_TYPES.get(path.suffix.lower(), "application/octet-stream"),
        as_attachment=True,
        download_name=attachment_name(path.name),
        max_age=0,
    )
    return response


# -- the WebSocket -------------------------------------------------------------------------------


@sock.route("/ws", bp=blueprint)  # type: ignore[untyped-decorator]
def websocket(ws: Any) -> None:
    transport = _transport()
    session = request.args["session"]
    agent = (request.args.get("agent") or "").strip().lower()[:MAX_AGENT_CHARS] or None
    if not _hello(ws):
        return
    client = Client(ws, channel_of(session), agent, session_digest(_session_cookie() or ""))
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
    if isinstance(key, str) and _page_key_ok(key):
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
    if not _is_text(text) or not all(isinstance(f, str) and _is_text(f) for f in files):
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

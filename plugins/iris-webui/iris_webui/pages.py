"""The Web UI's pages and its login: ``/`` (the chat, once logged in), ``/login`` (the page;
``?key=`` exchanges a one-time key for a session cookie), ``GET /login/options``, ``POST /login``
(the password) and ``POST /logout``. The static files are the blueprint's own ``/static/…``.

A login sets the session cookie and hands the page its page key (in the address's fragment, or in
the JSON answer), which every API call and the WebSocket must show besides the cookie.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import cast

from flask import Response, jsonify, redirect, request, send_from_directory

from iris_runtime.web.errors import error_response
from iris_webui.auth import COOKIE_NAME, SESSION_TTL, consume_login_key, session_digest
from iris_webui.blueprint import (
    blueprint,
    is_text,
    logged_in,
    same_origin,
    session_cookie,
    web_transport,
)

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _page(name: str) -> Response:
    response = send_from_directory(STATIC, name, max_age=0)
    response.headers["Cache-Control"] = "no-store"
    return response


def _to_login(error: str | None = None) -> Response:
    return cast(Response, redirect("/login" + (f"?error={error}" if error else ""), code=303))


def _logged_in_response(page_key_target: Callable[[str], Response]) -> Response:
    """A new session: its cookie on the answer ``page_key_target`` makes with its page key."""
    token, page_key = web_transport().logins.create()
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
    if not logged_in():
        return _to_login()
    return _page("index.html")


@blueprint.get("/login")
def login_page() -> Response:
    key = request.args.get("key")
    if key is None:
        # Always the page, even with a live cookie: a page that lost its page key is sent here
        # (401 page_key_required) and needs a new login; sending it home would loop.
        return _page("login.html")
    problem = consume_login_key(web_transport().config.data_dir, key)
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
    return jsonify({"password": web_transport().password.enabled, "logged_in": logged_in()})


@blueprint.post("/login")
def login_password() -> Response | tuple[Response, int]:
    wants_json = request.is_json

    def refuse(message: str, code: str, status: int) -> Response:
        return error_response(message, code, status) if wants_json else _to_login(code)

    if not same_origin():
        return error_response("cross-origin request refused", "bad_origin", 403)
    gate = web_transport().password
    if not gate.enabled:
        return refuse("password login is off (IRIS_WEBUI_PASSWORD)", "password_disabled", 400)
    address = str(request.remote_addr or "?")
    try:
        body = request.get_json(silent=True) if wants_json else None
    except RecursionError:  # "[[[[…" thousands deep; Flask's silent only covers ValueError
        body = None
    candidate = body.get("password") if isinstance(body, dict) else None
    if not wants_json:
        candidate = request.form.get("password")
    if not isinstance(candidate, str) or not is_text(candidate):
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


@blueprint.post("/logout")
def logout() -> Response:
    if not same_origin():
        return error_response("cross-origin request refused", "bad_origin", 403)
    transport = web_transport()
    cookie = session_cookie()
    if transport.logins.valid(cookie):
        assert cookie is not None
        transport.logins.revoke(cookie)
        # Its open sockets were let in by the session that just ended: they end too.
        transport.hub.close_login(session_digest(cookie))
    response = jsonify({"ok": True}) if request.is_json else _to_login("signed_out")
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="Strict")
    return response

"""The Web UI's blueprint (served on ``IRIS_WEBUI_PORT``) and what every request to it passes.

Every request must name the Web UI by a Host it knows (loopback names and ``IRIS_API_HOST`` with
the Web UI's port, plus ``IRIS_WEBUI_ALLOWED_HOSTS``): a DNS-rebinding page, whose Host is its
own domain, gets 421 before any route runs.

Every response carries a strict Content-Security-Policy (no inline script or style), and
``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer`` (a login link's key never leaves in
a Referer) and ``X-Content-Type-Options: nosniff``.

JSON under ``/api/`` (:func:`api`) needs the session cookie and the session's page key (header
``X-Iris-Page-Key``); calls that change something also need the page's own ``Origin`` and a JSON
or multipart body (a cross-site form can send neither). The cookie alone opens only the static
pages: browsers send 127.0.0.1's cookies to every port on it (see ``auth``).

The routes join this blueprint from their own modules: :mod:`iris_webui.pages`,
:mod:`iris_webui.json_api`, :mod:`iris_webui.agent_models` and :mod:`iris_webui.websocket`
(:mod:`iris_webui.routes` imports them all).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from flask import Blueprint, Response, current_app, request

from iris_runtime.errors import NotFound
from iris_runtime.web.errors import error_response
from iris_webui.auth import COOKIE_NAME
from iris_webui.transport import WebTransport
from iris_webui.uploads import channel_of

PAGE_KEY_HEADER = "X-Iris-Page-Key"

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

blueprint = Blueprint("webui", __name__, static_folder="static", static_url_path="/static")

F = TypeVar("F", bound=Callable[..., Any])


@blueprint.after_app_request
def _security_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    if request.path.startswith(("/api/", "/login")) or request.path == "/":
        response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.before_app_request
def _guard_host() -> Response | None:
    """DNS rebinding: a foreign page whose domain now resolves to 127.0.0.1 is same-origin with
    itself, and its requests name its own domain in Host. Only our own names are answered."""
    if request.host.lower() in web_transport().config.allowed_hosts:
        return None
    return error_response(
        "unknown Host; add it to IRIS_WEBUI_ALLOWED_HOSTS to use it", "misdirected_request", 421
    )


# -- who is asking -------------------------------------------------------------------------------


def web_transport() -> WebTransport:
    runtime = current_app.extensions["iris"]
    transport = runtime.engine.transports.get("webui")
    assert isinstance(transport, WebTransport)
    return transport


def session_cookie() -> str | None:
    return request.cookies.get(COOKIE_NAME)


def logged_in() -> bool:
    """The cookie is a live session's: enough for the static pages, nothing else."""
    return web_transport().logins.valid(session_cookie())


def page_key_ok(page_key: str | None) -> bool:
    return web_transport().logins.authorised(session_cookie(), page_key)


def same_origin() -> bool:
    return request.headers.get("Origin") == f"{request.scheme}://{request.host}"


def api(*, changes: bool = False) -> Callable[[F], F]:
    """A JSON route: the session cookie, and for ``changes`` the page's own Origin and a body a
    cross-site form cannot send (JSON or multipart)."""

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not logged_in():
                return error_response("log in first", "unauthorized", 401)
            if not page_key_ok(request.headers.get(PAGE_KEY_HEADER)):
                return error_response(
                    "this page has no key for the session; log in again", "page_key_required", 401
                )
            if changes:
                if not same_origin():
                    return error_response("cross-origin request refused", "bad_origin", 403)
                kind = request.mimetype
                if kind not in {"application/json", "multipart/form-data"}:
                    return error_response(
                        "send JSON or multipart/form-data", "unsupported_media_type", 415
                    )
            return view(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def existing_channel(session: str) -> str:
    """The channel of a conversation that exists (made by POST /api/sessions or a message)."""
    channel = channel_of(session)
    if not (web_transport().config.data_dir / channel).is_dir():
        raise NotFound(f"no conversation {session!r}", code="unknown_session")
    return channel


def is_text(value: str) -> bool:
    """Encodable as UTF-8: a lone surrogate ("\\ud800" escaped in JSON) is not, and cannot be
    sent on to any socket or model."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

"""Who gets in: the one-time login link, the password, the session cookie and the Origin check
(pages, JSON API and WebSocket), the security headers, and the API token never leaking."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests
import websocket
from server_harness import WebIris

PASSWORD = "correct horse battery staple"  # noqa: S105 (a test's own password)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def _error_of(reply: requests.Response) -> str | None:
    """The ``?error=`` code a refused form login redirects to."""
    match = re.search(r"[?&]error=([a-z_]+)", reply.headers.get("Location", ""))
    return match.group(1) if match else None


def test_the_login_link_works_once(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris()
    key = web.login_key()
    http = web.http()
    reply = http.get(f"{web.url}/login", params={"key": key}, allow_redirects=False, timeout=30)
    assert reply.status_code == 303 and reply.headers["Location"] == "/"
    cookie = reply.headers["Set-Cookie"]
    assert cookie.startswith("iris_webui=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert http.get(f"{web.url}/", allow_redirects=False, timeout=30).status_code == 200
    signed_in = http.get(f"{web.url}/login", allow_redirects=False, timeout=30)
    assert signed_in.status_code == 303 and signed_in.headers["Location"] == "/"

    again = web.http().get(
        f"{web.url}/login", params={"key": key}, allow_redirects=False, timeout=30
    )
    assert again.status_code == 303 and _error_of(again) == "used_key"
    assert "Set-Cookie" not in again.headers
    wrong = web.http().get(
        f"{web.url}/login", params={"key": "not-the-key"}, allow_redirects=False, timeout=30
    )
    assert _error_of(wrong) == "invalid_key" and "Set-Cookie" not in wrong.headers
    assert key not in web.log_text().replace(f"/login?key={key}", "")  # printed once, not logged


def test_without_a_cookie_nothing_but_the_login_page(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    http = web.http()
    home = http.get(f"{web.url}/", allow_redirects=False, timeout=30)
    assert home.status_code == 303 and home.headers["Location"] == "/login"
    assert http.get(f"{web.url}/login", timeout=30).status_code == 200
    for path in ("/api/sessions", "/api/agents"):
        reply = http.get(web.url + path, timeout=30)
        assert reply.status_code == 401 and reply.json()["code"] == "unauthorized"
    refused = http.post(f"{web.url}/api/sessions", json={}, timeout=30)
    assert refused.status_code == 401
    forged = http.get(f"{web.url}/api/sessions", cookies={"iris_webui": "x" * 43}, timeout=30)
    assert forged.status_code == 401


def test_state_changes_need_the_pages_origin_and_a_json_body(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    http = web.login()
    foreign = http.post(
        f"{web.url}/api/sessions", json={}, headers={"Origin": "http://evil.example"}, timeout=30
    )
    assert foreign.status_code == 403 and foreign.json()["code"] == "bad_origin"
    form = http.post(f"{web.url}/api/sessions", data={"a": "b"}, timeout=30)
    assert form.status_code == 415 and form.json()["code"] == "unsupported_media_type"
    assert http.post(f"{web.url}/api/sessions", json={}, timeout=30).status_code == 201


def test_the_websocket_wants_the_cookie_and_the_pages_origin(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    http = web.login()
    session = web.new_session(http)
    for kwargs in ({"cookie": False}, {"origin": "http://evil.example"}):
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            web.connect(http, session, **kwargs)  # type: ignore[arg-type]
        assert refused.value.status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as unknown:
        web.connect(http, "no-such-session")
    assert unknown.value.status_code == 404
    sock = web.connect(http, session)
    assert sock.recv()["type"] == "ready"

    # Logging out ends the session: the same cookie opens nothing any more.
    cookie = http.cookies.get("iris_webui")
    out = http.post(f"{web.url}/logout", json={}, timeout=30)
    assert out.status_code == 200
    stale = web.http()
    stale.cookies.set("iris_webui", cookie)
    assert stale.get(f"{web.url}/api/sessions", timeout=30).status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException):
        web.connect(stale, session)


def test_password_login_is_rate_limited(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris(IRIS_WEBUI_PASSWORD=PASSWORD)
    options = web.http().get(f"{web.url}/login/options", timeout=30).json()
    assert options == {"password": True, "logged_in": False}

    no_origin = requests.post(f"{web.url}/login", data={"password": PASSWORD}, timeout=30)
    assert no_origin.status_code == 403

    http = web.http()
    ok = http.post(
        f"{web.url}/login", data={"password": PASSWORD}, allow_redirects=False, timeout=30
    )
    assert ok.status_code == 303 and ok.headers["Location"] == "/"
    assert http.get(f"{web.url}/api/sessions", timeout=30).status_code == 200

    codes = []
    for _ in range(5):
        wrong = web.http().post(
            f"{web.url}/login", data={"password": "guess"}, allow_redirects=False, timeout=30
        )
        codes.append(_error_of(wrong))
    assert codes == ["invalid_password"] * 5
    blocked = web.http().post(f"{web.url}/login", json={"password": PASSWORD}, timeout=30)
    assert blocked.status_code == 429 and blocked.json()["code"] == "rate_limited"


def test_without_a_password_only_links_work(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris()
    reply = web.http().post(f"{web.url}/login", json={"password": ""}, timeout=30)
    assert reply.status_code == 400 and reply.json()["code"] == "password_disabled"


def test_pages_carry_the_security_headers_and_never_the_api_token(
    start_web_iris: Callable[..., WebIris],
) -> None:
    web = start_web_iris()
    token = web.server.token
    http = web.login()
    session = web.new_session(http)
    bodies: list[str] = []
    for path in ("/", "/login", "/static/app.js", "/static/app.css", "/api/sessions"):
        reply = http.get(web.url + path, timeout=30)
        assert reply.status_code == 200, path
        assert reply.headers["Content-Security-Policy"] == CSP, path
        assert reply.headers["X-Frame-Options"] == "DENY"
        assert reply.headers["Referrer-Policy"] == "no-referrer"
        assert reply.headers["X-Content-Type-Options"] == "nosniff"
        bodies.append(reply.text)
    missing = http.get(f"{web.url}/static/../iris_webui/routes.py", timeout=30)
    assert missing.status_code == 404 and missing.headers["Content-Security-Policy"] == CSP
    for page in ("/", "/login"):
        html = http.get(web.url + page, timeout=30).text
        assert "<script>" not in html and "style=" not in html  # the CSP forbids inline code

    sock = web.connect(http, session)
    sock.send({"type": "message", "text": "hello"})
    frames = sock.final()
    bodies += [str(f) for f in [*sock.frames, *frames]]
    bodies += [str(c.value) for c in http.cookies]
    assert not [b for b in bodies if token in b]

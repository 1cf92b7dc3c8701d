"""Who gets in: the one-time login link, the password, the session cookie and the Origin check
(pages, JSON API and WebSocket), the security headers, and the API token never leaking."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests
import websocket
from server_harness import PAGE_KEY_HEADER, WebIris

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
    # The page key travels in the fragment (never sent to a server, never in a Referer).
    assert reply.status_code == 303 and reply.headers["Location"].startswith("/#k=")
    assert len(reply.headers["Location"]) > len("/#k=") + 40
    cookie = reply.headers["Set-Cookie"]
    assert cookie.startswith("iris_webui=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert http.get(f"{web.url}/", allow_redirects=False, timeout=30).status_code == 200
    # The login page shows even with a live cookie: a page without its key is sent there.
    assert http.get(f"{web.url}/login", allow_redirects=False, timeout=30).status_code == 200

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
    # No cookie is "who are you" (401), as on every other route; a foreign page is refused.
    for kwargs, status in (({"cookie": False}, 401), ({"origin": "http://evil.example"}, 403)):
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            web.connect(http, session, **kwargs)  # type: ignore[arg-type]
        assert refused.value.status_code == status
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
    assert ok.status_code == 303 and ok.headers["Location"].startswith("/#k=")
    page_key = ok.headers["Location"].removeprefix("/#k=")
    keyed = {PAGE_KEY_HEADER: page_key}
    assert http.get(f"{web.url}/api/sessions", headers=keyed, timeout=30).status_code == 200
    as_json = web.http().post(f"{web.url}/login", json={"password": PASSWORD}, timeout=30)
    assert as_json.status_code == 200 and as_json.json()["ok"] is True
    assert as_json.json()["page_key"] not in (page_key, "")

    # A lone surrogate in a JSON password is a bad request, not a server error.
    odd = web.http().post(
        f"{web.url}/login",
        data='{"password": "\\ud800"}',
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert odd.status_code == 400 and odd.json()["code"] == "invalid_password"
    deep = web.http().post(
        f"{web.url}/login",
        data="[" * 50_000 + "]" * 50_000,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert deep.status_code == 400

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


def test_the_cookie_alone_opens_nothing_but_pages(start_web_iris: Callable[..., WebIris]) -> None:
    """Browsers send 127.0.0.1's cookies to every port on it: a local service that replays the
    cookie must still be refused by the API and the socket without the page key."""
    web = start_web_iris()
    http = web.login()
    session = web.new_session(http)
    replay = web.http()
    replay.cookies.set("iris_webui", http.cookies.get("iris_webui"))
    assert replay.get(f"{web.url}/", allow_redirects=False, timeout=30).status_code == 200
    for key in (None, "wrong-key", "x" * 500):
        headers = {} if key is None else {PAGE_KEY_HEADER: key}
        for method, path in (("GET", "/api/sessions"), ("POST", "/api/sessions")):
            reply = replay.request(method, web.url + path, json={}, headers=headers, timeout=30)
            assert reply.status_code == 401, (method, path, key)
            assert reply.json()["code"] == "page_key_required"
    # Another session's page key does not fit this cookie either.
    other = web.login_with_password_or_link()
    mixed = {PAGE_KEY_HEADER: other.headers[PAGE_KEY_HEADER]}
    assert replay.get(f"{web.url}/api/sessions", headers=mixed, timeout=30).status_code == 401

    for hello in ({"type": "hello"}, {"type": "hello", "page_key": "wrong"}, {"type": "ping"}):
        sock = web.connect(replay, session, hello=False)
        sock.send(hello)
        refusal = sock.recv()
        assert refusal["type"] == "error" and refusal["code"] == "page_key_required"
        opcode, payload = sock.ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE
        assert int.from_bytes(payload[:2], "big") == 1008
    good = web.connect(http, session)
    assert good.recv()["type"] == "ready"


def test_signing_out_closes_that_sessions_sockets(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris()
    http, other = web.login(), web.login_with_password_or_link()
    session = web.new_session(http)
    mine, theirs = web.connect(http, session), web.connect(other, session)
    assert mine.recv()["type"] == theirs.recv()["type"] == "ready"
    assert http.post(f"{web.url}/logout", json={}, timeout=30).status_code == 200
    opcode, _ = mine.ws.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    theirs.send({"type": "ping"})  # the other browser's socket stays open
    assert theirs.recv() == {"type": "pong"}


def test_only_known_host_names_are_answered(start_web_iris: Callable[..., WebIris]) -> None:
    """DNS rebinding: a foreign domain resolved to 127.0.0.1 names itself in Host."""
    web = start_web_iris(IRIS_WEBUI_ALLOWED_HOSTS="iris.lan, box.example:8443")
    port = web.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"iris.lan:{port}",
                 "box.example:8443"):  # fmt: skip
        reply = requests.get(f"{web.url}/login", headers={"Host": host}, timeout=30)
        assert reply.status_code == 200, host
    for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", "iris.lan:1",
                 f"box.example:{port}"):  # fmt: skip
        for path in ("/login", "/api/sessions", "/ws?session=x", "/static/app.js"):
            reply = requests.get(web.url + path, headers={"Host": host}, timeout=30)
            assert reply.status_code == 421, (host, path)
            assert reply.json()["code"] == "misdirected_request"

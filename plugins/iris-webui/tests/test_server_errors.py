"""The Web UI port's errors: a known path with the wrong method is ``405`` with ``Allow``
(RFC 9110 §15.5.6) listing what the route accepts, and a JSON error body."""

from __future__ import annotations

from collections.abc import Callable

import requests
from server_harness import WebIris

# path -> the methods its routes accept (Flask adds HEAD to GET and OPTIONS to every route)
ROUTES = {
    "/login": {"GET", "HEAD", "POST", "OPTIONS"},
    "/logout": {"POST", "OPTIONS"},
    "/api/sessions": {"GET", "HEAD", "POST", "OPTIONS"},
    "/api/sessions/x/history": {"GET", "HEAD", "OPTIONS"},
    "/api/sessions/x/uploads": {"POST", "OPTIONS"},
}


def _allow(reply: requests.Response) -> set[str]:
    assert "Allow" in reply.headers, f"405 without Allow: {dict(reply.headers)}"
    return {method.strip() for method in reply.headers["Allow"].split(",") if method.strip()}


def test_a_wrong_method_is_405_with_allow(start_web_iris: Callable[..., WebIris]) -> None:
    web = start_web_iris()
    http = web.login()
    for path, methods in ROUTES.items():
        wrong = next(m for m in ("DELETE", "PUT", "PATCH") if m not in methods)
        reply = http.request(wrong, web.url + path, timeout=30)
        assert reply.status_code == 405, (path, reply.text)
        assert reply.json()["code"] == "method_not_allowed"
        assert _allow(reply) == methods, path
    # Without a cookie too: routing answers before any route's own checks.
    anonymous = requests.delete(f"{web.url}/login", timeout=30)
    assert anonymous.status_code == 405 and _allow(anonymous) == ROUTES["/login"]

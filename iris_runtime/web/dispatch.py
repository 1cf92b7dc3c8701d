"""One process, several ports: pick the WSGI app by the port a request arrived on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_NOT_FOUND = b'{"error":"not found","code":"not_found"}'


def not_found_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response(
        "404 Not Found",
        [("Content-Type", "application/json"), ("Content-Length", str(len(_NOT_FOUND)))],
    )
    return [_NOT_FOUND]


class PortDispatcher:
    def __init__(self, apps: dict[int, WSGIApp], runtime: Any = None) -> None:
        self.apps = dict(apps)
        self.runtime = runtime

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            port = int(environ.get("SERVER_PORT") or 0)
        except ValueError:
            port = 0
        return self.apps.get(port, not_found_app)(environ, start_response)

"""Bearer-token authentication for the internal API (constant-time comparison)."""

from __future__ import annotations

import hmac

from flask import Flask, Response, request

from iris_runtime.web.errors import error_response

PUBLIC_ENDPOINTS = frozenset({"health.health"})


def token_matches(presented: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(presented.encode(), expected.encode())


def require_bearer_token(app: Flask, expected: str) -> None:
    @app.before_request
    def _check_token() -> Response | None:
        if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
            return None
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return error_response(
                "missing bearer token (Authorization: Bearer …)", "unauthorized", 401
            )
        if not token_matches(presented.strip(), expected):
            return error_response("invalid API token", "unauthorized", 401)
        return None

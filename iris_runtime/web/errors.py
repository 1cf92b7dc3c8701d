"""Every error leaves the API as JSON ``{"error": message, "code": code}`` with its status."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)


# The exception's own rendering (an HTML page) is replaced by a JSON body, so its entity headers
# go; the rest (Allow on 405, Retry-After, WWW-Authenticate, Content-Range) is protocol meaning.
_BODY_HEADERS = frozenset({"content-type", "content-length"})


def error_response(message: str, code: str, http_status: int, **extra: object) -> Response:
    response = jsonify({"error": message, "code": code, **extra})
    response.status_code = http_status
    if http_status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="iris"'
    return response


def protocol_headers(exc: HTTPException) -> list[tuple[str, str]]:
    """The headers werkzeug attaches to ``exc`` (``Allow`` for a 405, ...), minus its body's."""
    return [(k, v) for k, v in exc.get_headers() if k.lower() not in _BODY_HEADERS]


def install_error_handlers(app: Flask) -> None:
    @app.errorhandler(IrisError)
    def _iris_error(exc: IrisError) -> Response:
        response = error_response(exc.message, exc.code, exc.status)
        response.headers.update(exc.response_headers())
        return response

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = (exc.name or "error").lower().replace(" ", "_")
        if status == 413:
            code = "payload_too_large"
        response = error_response(exc.description or exc.name or "error", code, status)
        for name, value in protocol_headers(exc):
            response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response("internal error; see the server log", "internal_error", 500)

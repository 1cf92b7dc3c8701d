"""``/secrets``: the secret broker's HTTP face.

``GET /secrets/<name>`` is open to agents with their own token (the broker checks the
allow-list); listing and changing secrets is for Iris's token only. Every response says
``Cache-Control: no-store`` so no proxy or client cache keeps a value. Every request, refused
ones included, leaves one line in the audit log.
"""

from __future__ import annotations

import uuid

from flask import Blueprint, Response, current_app, g, jsonify, request

from iris_runtime.engine.channels import is_safe_token
from iris_runtime.errors import PayloadTooLarge
from iris_runtime.runtime import Runtime
from iris_runtime.secrets import audit
from iris_runtime.secrets.backend import MAX_SECRET_BYTES
from iris_runtime.secrets.broker import printable_name
from iris_runtime.web.bodies import json_object

blueprint = Blueprint("secrets", __name__, url_prefix="/secrets")

# A JSON-escaped value can be up to six times its raw size ("\u0001").
MAX_BODY_BYTES = 6 * MAX_SECRET_BYTES + 1024
REQUEST_ID_HEADER = "X-Request-Id"


def _runtime() -> Runtime:
    runtime: Runtime = current_app.extensions["iris"]
    return runtime


def request_id() -> str:
    """The caller's ``X-Request-Id`` when it is a safe token, else a fresh one."""
    if "secrets_request_id" not in g:
        presented = request.headers.get(REQUEST_ID_HEADER, "")
        g.secrets_request_id = presented if is_safe_token(presented) else uuid.uuid4().hex
    rid: str = g.secrets_request_id
    return rid


@blueprint.get("")
def list_secrets() -> Response:
    names = _runtime().secrets.names(g.caller, request_id())
    return jsonify({"names": names, "mode": _runtime().secrets.mode})


@blueprint.get("/<path:name>")
def read_secret(name: str) -> Response:
    value = _runtime().secrets.read(g.caller, name, request_id())
    return jsonify({"name": name, "value": value})


@blueprint.put("/<path:name>")
def put_secret(name: str) -> tuple[Response, int]:
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"a secret value may be at most {MAX_SECRET_BYTES} bytes")
    body = json_object(required={"value"})
    _runtime().secrets.put(g.caller, name, body["value"], request_id())
    return jsonify({"name": name, "stored": True}), 200


@blueprint.delete("/<path:name>")
def delete_secret(name: str) -> tuple[Response, int]:
    _runtime().secrets.delete(g.caller, name, request_id())
    return Response(status=204), 204


@blueprint.after_request
def no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    response.headers[REQUEST_ID_HEADER] = request_id()
    if response.status_code == 401:
        # Refused before any view ran: the broker never saw it, so the trail is written here.
        name = (request.view_args or {}).get("name", "*")
        action = {"GET": "read", "PUT": "write", "DELETE": "delete"}.get(request.method, "?")
        if request.url_rule is not None and request.url_rule.rule == "/secrets":
            action = "list"
        _runtime().secrets.audit.record(
            "(unknown)", action, printable_name(name), audit.UNAUTHENTICATED, request_id()
        )
    return response

"""``GET /health``: liveness, readable without a token (it reveals no secret)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from iris_runtime import __version__
from iris_runtime.web.capacity import HeldRequests
from iris_runtime.web.slots import EXTENSION

blueprint = Blueprint("health", __name__)


@blueprint.get("/health")
def health() -> Response:
    runtime = current_app.extensions["iris"]
    held: HeldRequests = current_app.extensions[EXTENSION]
    return jsonify(
        {
            "status": "ok",
            "version": __version__,
            "agent": runtime.settings.agent_name,
            "provider": runtime.settings.provider,
            "held": {
                kind: {"open": count, "limit": limit}
                for kind, (count, limit) in held.in_use().items()
            },
        }
    )

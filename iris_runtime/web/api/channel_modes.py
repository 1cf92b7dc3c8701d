"""``GET /channels``: the channel modes in force (channels.json, spec 003) and, when the file on
disk was rejected, why (the previous configuration stays in force meanwhile)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from iris_runtime.channel_modes.cli import config_json
from iris_runtime.runtime import Runtime

blueprint = Blueprint("channel_modes", __name__)


@blueprint.get("/channels")
def list_channel_modes() -> Response:
    runtime: Runtime = current_app.extensions["iris"]
    modes = runtime.engine.channel_modes
    config = modes.current()
    body = config_json(config)
    defaults = body.pop("defaults", None)
    return jsonify({"channels": body, "defaults": defaults, "problem": modes.problem})

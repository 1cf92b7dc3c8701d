"""Channel-addressed event injection: a synthetic message delivered by the channel's owner."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from iris_runtime.engine.channels import validate_channel_id
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.runtime import Runtime
from iris_runtime.web.bodies import json_object, string_field
from iris_runtime.web.errors import error_response

blueprint = Blueprint("channels", __name__, url_prefix="/channels/<channel_id>")


@blueprint.post("/events")
def inject_event(channel_id: str) -> tuple[Response, int] | Response:
    runtime: Runtime = current_app.extensions["iris"]
    channel = validate_channel_id(channel_id)
    body = json_object(required={"text"}, optional={"user"})
    event = TransportEvent(
        channel=channel,
        text=string_field(body, "text"),
        user=string_field(body, "user") if "user" in body else "event",
    )
    transport = runtime.engine.transports.owner(channel)
    if not transport.enqueue_event(event):
        return error_response(
            f"{transport.transport_id} refused the event: the channel's queue is full",
            "queue_full",
            429,
        )
    return jsonify({"accepted": True, "transport": transport.transport_id}), 202

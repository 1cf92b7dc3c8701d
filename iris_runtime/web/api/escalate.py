"""``POST /escalate``: a sub-agent that cannot heal itself asks for a human.

The escalation is posted to the channel it names (or ``IRIS_ESCALATION_CHANNEL``) by the
transport that owns that channel, and recorded in that channel's log.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify

from iris_runtime.engine.channels import validate_channel_id
from iris_runtime.errors import InvalidInput
from iris_runtime.runtime import Runtime
from iris_runtime.web.bodies import json_object, string_field

blueprint = Blueprint("escalate", __name__)

MAX_ESCALATION_CHARS = 8000


@blueprint.post("/escalate")
def escalate() -> tuple[Response, int]:
    runtime: Runtime = current_app.extensions["iris"]
    body = json_object(required={"text"}, optional={"channel", "agent", "severity"})
    text = string_field(body, "text")
    if len(text) > MAX_ESCALATION_CHARS:
        raise InvalidInput(f"'text' is longer than {MAX_ESCALATION_CHARS}", code="invalid_field")
    channel = (
        string_field(body, "channel") if "channel" in body else runtime.settings.escalation_channel
    )
    if not channel:
        raise InvalidInput(
            "name a 'channel' or set IRIS_ESCALATION_CHANNEL", code="no_escalation_channel"
        )
    validate_channel_id(channel)
    severity = string_field(body, "severity") if "severity" in body else "error"
    # Who is escalating comes from the token; a body "agent" is only believed from iris itself.
    caller: str = g.caller
    agent = string_field(body, "agent") if caller == "iris" and "agent" in body else caller
    transport = runtime.engine.transports.owner(channel)
    message = f"⚠ Escalation from {agent} ({severity}): {text}"
    message_id = transport.post_message(channel, message)
    runtime.engine.sessions.append_marker(
        channel,
        "escalation",
        agent=agent,
        severity=severity,
        text=text,
        transport=transport.transport_id,
        messageId=message_id,
    )
    return jsonify(
        {
            "delivered": True,
            "channel": channel,
            "agent": agent,
            "transport": transport.transport_id,
            "messageId": message_id,
        }
    ), 202

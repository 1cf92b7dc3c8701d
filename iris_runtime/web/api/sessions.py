"""The session API: drive a conversation from your own program (spec 000, "Internal HTTP API").

A session ``<id>`` is the channel ``SESSION-<id>``, served by the first session-capable transport
that owns it (the headless bridge unless a plugin claims it).
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from iris_runtime.engine.channels import session_channel
from iris_runtime.engine.sessions import since_last_reset, usage_by_agent
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.engine.usage import total, usage_to_json
from iris_runtime.runtime import Runtime
from iris_runtime.session_agents.events import describe
from iris_runtime.web.api.attachments import resolve_handles, save_upload
from iris_runtime.web.bodies import json_object, string_field
from iris_runtime.web.capacity import WAITS
from iris_runtime.web.errors import error_response
from iris_runtime.web.slots import hold
from iris_runtime.web.sse import observer_stream

blueprint = Blueprint("sessions", __name__, url_prefix="/sessions/<session_id>")

RESULT_STATUS = {"done": 200, "stopped": 200, "failed": 502, "cancelled": 503}


def _runtime() -> Runtime:
    runtime: Runtime = current_app.extensions["iris"]
    return runtime


@blueprint.post("/attachments")
def upload_attachment(session_id: str) -> tuple[Response, int]:
    runtime = _runtime()
    return jsonify(save_upload(runtime.settings.data_dir, session_channel(session_id))), 201


@blueprint.post("/message")
def send_message(session_id: str) -> Response:
    runtime = _runtime()
    channel = session_channel(session_id)
    body = json_object(required={"text"}, optional={"attachments", "user"})
    text = string_field(body, "text")
    user = string_field(body, "user") if "user" in body else "api"
    attachments = resolve_handles(runtime.settings.data_dir, channel, body.get("attachments", []))
    event = TransportEvent(channel=channel, text=text, user=user, attachments=attachments)
    with hold(WAITS):  # 503 at the limit, before the message reaches the conversation
        ticket = runtime.engine.transports.session_owner(channel).inject_session_message(event)
        result = ticket.wait()
    payload = {
        "text": result.text,
        "status": result.status,
        "runId": result.run_id,
        "usage": usage_to_json(result.usage),
    }
    status = RESULT_STATUS.get(result.status, 200)
    if status != 200:
        return error_response(
            result.error or result.status, result.error_code or result.status, status, **payload
        )
    return jsonify(payload)


@blueprint.post("/stop")
def stop(session_id: str) -> Response:
    stopped = _runtime().engine.handle_stop(session_channel(session_id))
    return jsonify({"stopped": stopped})


@blueprint.get("/stream")
def stream(session_id: str) -> Response:
    runtime = _runtime()
    channel = session_channel(session_id)
    return observer_stream(
        runtime.engine.observers, channel, runtime.settings.sse_heartbeat_seconds
    )


@blueprint.get("/history")
def history(session_id: str) -> Response:
    channel = session_channel(session_id)
    everything = request.args.get("all", "").lower() in {"1", "true", "yes"}
    sessions = _runtime().engine.sessions
    # One read: the usage totals cover the whole log, the entries shown start at the last reset.
    logged = sessions.entries(channel)
    entries = logged if everything else since_last_reset(logged)
    per_agent = usage_by_agent(logged)
    usage = {
        "total": usage_to_json(total(per_agent.values())),
        "byAgent": {agent: usage_to_json(u) for agent, u in per_agent.items()},
    }
    return jsonify({"sessionId": session_id, "entries": entries, "usage": usage})


@blueprint.get("/subagents")
def subagents(session_id: str) -> Response:
    """The sub-agents spawned from this session (``?archived=1``: archived ones too)."""
    runtime = _runtime()
    channel = session_channel(session_id)
    service = runtime.subagents
    if service is None:
        return error_response(
            "session sub-agents are off: state.db cannot be used (see the log)",
            "subagents_unavailable",
            503,
        )
    archived = request.args.get("archived", "").lower() in {"1", "true", "yes"}
    listed = [
        {
            **describe(spawn, service.current_run(spawn)),
            "index": spawn.seq,
            "transcript": str(runtime.engine.sessions.log_path(spawn.child_channel)),
        }
        for spawn in service.spawns(channel, archived=archived)
    ]
    return jsonify({"sessionId": session_id, "subagents": listed})


@blueprint.post("/reset")
def reset(session_id: str) -> Response:
    runtime = _runtime()
    channel = session_channel(session_id)
    json_object()  # an empty body, or {} — anything else is a mistake worth reporting
    runtime.engine.transports.session_owner(channel).reset_session_context(channel)
    return jsonify({"reset": True})


@blueprint.post("/inject-turn")
def inject_turn(session_id: str) -> Response:
    """Append a turn to the conversation without running the model (human takeover)."""
    runtime = _runtime()
    channel = session_channel(session_id)
    body = json_object(optional={"user", "assistant"})
    turn = [(role, string_field(body, role)) for role in ("user", "assistant") if role in body]
    if not turn:
        return error_response("give 'user', 'assistant' or both", "missing_fields", 400)
    for role, text in turn:
        runtime.engine.sessions.append_message(channel, role, text, injected=True)
    return jsonify({"injected": len(turn)})

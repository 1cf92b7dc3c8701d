"""The bridge port: ``POST /bridge`` and ``GET /bridge/jobs/<id>``, and 404 for everything else.

Both answer only a caller presenting this agent's own API token (``Authorization: Bearer``):
whoever can post here runs the agent's tools with its allow-listed secrets.

The stream's status line and headers go out before the run starts; that early 200 is what keeps
long runs from hitting a client's time-to-first-byte limit, and it is why failures arrive as an
``error`` line rather than an HTTP status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import NotFound

from iris_runtime.bridge.jobs import Event, Job
from iris_runtime.bridge.protocol import (
    NDJSON,
    PROTOCOL_VERSION,
    REQUEST_FIELDS,
    TERMINAL_TYPES,
    parse_request,
    validate_request_id,
)
from iris_runtime.bridge.service import BridgeService
from iris_runtime.errors import InvalidInput
from iris_runtime.failpoints import failpoint
from iris_runtime.web.auth import bearer_token, token_matches
from iris_runtime.web.bodies import json_object
from iris_runtime.web.capacity import STREAMS, WAITS, HeldRequests
from iris_runtime.web.errors import error_response, install_error_handlers
from iris_runtime.web.slots import EXTENSION, held_until_closed, hold

log = logging.getLogger(__name__)
blueprint = Blueprint("bridge", __name__)

# What the port serves; everything else is a 404.
SERVED = frozenset({("POST", "bridge.bridge"), ("GET", "bridge.job_events")})
# Plain-shape failures keep their meaning as HTTP statuses.
ERROR_STATUS = {"queue_full": 429, "shutting_down": 503, "interrupted": 502}


def _service() -> BridgeService:
    service: BridgeService = current_app.extensions["iris_bridge"]
    return service


def _line(event: Event) -> str:
    shown = {k: v for k, v in event.items() if k != "ts"}
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":")) + "\n"


def _stream(job: Job, heartbeat_seconds: float) -> Iterator[str]:
    yield _line({"type": "accepted", "requestId": job.request_id, "protocol": PROTOCOL_VERSION})
    seen = 0
    while True:
        # Events that arrived together go out in one write; each line was serialized once, when
        # it was logged.
        lines, done = job.wait_lines_after(seen, heartbeat_seconds)
        if not lines:
            yield '{"type":"heartbeat"}\n'
            continue
        seen += lines.count("\n")
        yield lines
        if done:  # the terminal line was among them
            return


def _wait_for_end(job: Job) -> Event:
    seen = 0
    while True:
        for event in job.wait_after(seen, 60.0):
            seen = event["seq"]
            if event["type"] in TERMINAL_TYPES:
                return event


@blueprint.post("/bridge")
def bridge() -> Response:
    service = _service()
    parsed = parse_request(json_object(optional=REQUEST_FIELDS, ignore_unknown=True))
    streamed = NDJSON in request.headers.get("Accept", "")
    slot = hold(STREAMS if streamed else WAITS)  # 503 at the limit, before any job exists
    with slot.released_on_failure():
        job = service.handle(parsed)
    failpoint("bridge.request_accepted")  # the job is logged and running; nothing sent yet
    if streamed:
        response = Response(
            _stream(job, service.settings.bridge_heartbeat_seconds), mimetype=NDJSON
        )
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
        return held_until_closed(response, slot)
    with slot:
        end = _wait_for_end(job)
    if end["type"] == "error":
        status = ERROR_STATUS.get(end.get("code", ""), 500)
        return error_response(end["error"], end["code"], status, requestId=job.request_id)
    body = {"text": end["text"], "requestId": job.request_id, "status": end.get("status")}
    if end.get("silent"):
        body["silent"] = True
    return jsonify(body)


@blueprint.get("/bridge/jobs/<request_id>")
def job_events(request_id: str) -> Response:
    validate_request_id(request_id)
    raw = request.args.get("since", "0")
    if not raw.isdigit():
        raise InvalidInput(
            f"'since' must be a non-negative integer, not {raw[:20]!r}", code="invalid_since"
        )
    events, done = _service().jobs.read(request_id, int(raw))
    shown = [{k: v for k, v in e.items() if k != "ts"} for e in events]
    return jsonify({"requestId": request_id, "events": shown, "done": done})


def _only_the_bridge() -> None:
    """404 for every (method, route) pair but the two the port serves: the spec promises 404,
    not the 405 a known path with another method gets, nor the HEAD and OPTIONS Flask adds."""
    if (request.method, request.endpoint) not in SERVED:
        raise NotFound()


def _authenticated() -> Response | None:
    """A 401 unless the caller sent ``Bearer <this agent's API token>`` (compared in constant
    time). Checked before the body is read, so a refused request creates nothing."""
    presented = bearer_token(request.headers.get("Authorization", "")) or ""
    if token_matches(presented, _service().settings.api_token):
        return None
    log.warning("refused a bridge request from %s: wrong or missing token", request.remote_addr)
    return error_response(
        "this agent's API token is required (Authorization: Bearer <token>)", "unauthorized", 401
    )


def create_bridge_app(
    service: BridgeService, max_body_bytes: int, held: HeldRequests | None = None
) -> Flask:
    app = Flask("iris.bridge", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["iris_bridge"] = service
    app.extensions[EXTENSION] = held or HeldRequests.from_settings(service.settings)
    install_error_handlers(app)
    app.before_request(_only_the_bridge)
    app.before_request(_authenticated)
    app.register_blueprint(blueprint)
    return app

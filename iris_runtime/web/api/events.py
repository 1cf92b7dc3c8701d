"""Scheduled events over the API: the same operations as ``iris events`` (list, add, rm, fire).

Like the CLI, these write event files atomically and let the watcher schedule them, so the API
adds no second way for an event to exist. Only Iris's shared token may call them (an agent token
gets 403 from the auth layer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.routing import PathConverter

from iris_runtime.errors import InvalidInput, PayloadTooLarge
from iris_runtime.events.catalog import (
    add_event,
    describe_written,
    fire_event,
    list_events,
    remove_event,
)
from iris_runtime.events.files import (
    MAX_EVENT_BYTES,
    EventsUnavailable,
    Folder,
    choose_folder,
    parse_event_fields,
)
from iris_runtime.events.schedule import SystemClock
from iris_runtime.events.service import EventService
from iris_runtime.runtime import Runtime
from iris_runtime.web.bodies import json_object, string_field

blueprint = Blueprint("events", __name__)


class EventNameConverter(PathConverter):
    """An event name in a path: a ``path`` (so a name with ``/`` or ``..`` reaches the handler
    and gets its clear 400) that never ends in ``/fire``, so ``/events/<name>/fire`` belongs to
    the fire route alone and a 405 there does not advertise a DELETE that could only fail."""

    regex = r"[^/](?:(?!/fire$).)*"


@blueprint.record_once
def _add_converter(state: BlueprintSetupState) -> None:
    # Recorded before the routes below: a converter must exist when its rules are added.
    state.app.url_map.converters["event_name"] = EventNameConverter


_EVENT_FIELDS = ("type", "channelId", "text", "at", "schedule", "timezone")


def _runtime() -> Runtime:
    runtime: Runtime = current_app.extensions["iris"]
    return runtime


def _service(runtime: Runtime) -> EventService:
    """The running event service; 503 when events are disabled (say, ``state.db`` is corrupt):
    writing files nobody will run, or listing them as scheduled, would mislead."""
    service = runtime.events
    if service is None:
        raise EventsUnavailable("scheduled events are not running in this process")
    if service.unavailable is not None:
        raise EventsUnavailable(service.unavailable)
    return service


def _folder(service: EventService) -> Folder:
    return choose_folder(service.folders, request.args.get("transport") or None)


@blueprint.get("/events")
def list_all() -> Response:
    runtime = _runtime()
    service = _service(runtime)
    entries = list_events(
        runtime.settings.data_dir,
        service.folders,
        SystemClock().now(),
        waiting=service.waiting(),
        next_time=service.next_time,
    )
    return jsonify({"events": entries})


@blueprint.post("/events")
def add() -> tuple[Response, int]:
    runtime = _runtime()
    service = _service(runtime)
    body = _small_json_body()
    name = string_field(body, "name")
    transport = string_field(body, "transport") if "transport" in body else None
    folder = choose_folder(service.folders, transport)
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise InvalidInput("'replace' must be true or false", code="invalid_field")
    spec = parse_event_fields({k: body[k] for k in _EVENT_FIELDS if k in body})
    refused = service.route_error(folder, spec)
    if refused is not None:
        raise refused
    data_dir = runtime.settings.data_dir
    path = add_event(data_dir, folder, name, spec, replace=replace)
    # From what was written, not from the folder: an immediate event may have run already.
    return jsonify(describe_written(data_dir, folder, path, spec, SystemClock().now())), 201


@blueprint.delete("/events/<event_name:name>")
def remove(name: str) -> Response:
    runtime = _runtime()
    path = remove_event(runtime.settings.data_dir, _folder(_service(runtime)), name)
    return jsonify({"removed": True, "id": _rel(runtime, path)})


@blueprint.post("/events/<event_name:name>/fire")
def fire(name: str) -> tuple[Response, int]:
    runtime = _runtime()
    folder = _folder(_service(runtime))
    json_object()  # an empty body, or {}
    path = fire_event(runtime.settings.data_dir, folder, name, SystemClock().now())
    return jsonify({"fired": True, "id": _rel(runtime, path)}), 202


def _rel(runtime: Runtime, path: Path) -> str:
    return path.relative_to(runtime.settings.data_dir).as_posix()


def _small_json_body() -> dict[str, Any]:
    """The request body, refused with 413 before it is parsed if an event could not hold it."""
    if (request.content_length or 0) > MAX_EVENT_BYTES:
        raise PayloadTooLarge(f"an event body is limited to {MAX_EVENT_BYTES} bytes")
    if len(request.get_data(cache=True)) > MAX_EVENT_BYTES:
        raise PayloadTooLarge(f"an event body is limited to {MAX_EVENT_BYTES} bytes")
    return json_object(
        required={"name", "type", "channelId", "text"},
        optional={"at", "schedule", "timezone", "transport", "replace"},
    )

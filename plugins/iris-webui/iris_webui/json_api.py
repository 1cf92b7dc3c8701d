"""The Web UI's JSON API (under ``/api/``, each route behind :func:`~iris_webui.blueprint.api`):
conversations (list, create, history), the agents a conversation can be pinned to, and files
(upload into a conversation, download from it).
"""

from __future__ import annotations

import secrets
from typing import Any

from flask import Response, jsonify, request, send_file

from iris_runtime.agents.registry import registry_for
from iris_runtime.custom_agents.router import picker_entries
from iris_runtime.engine.channels import resolve_channel_dir
from iris_runtime.web.errors import error_response
from iris_webui.blueprint import api, blueprint, existing_channel, web_transport
from iris_webui.history import conversation, list_sessions
from iris_webui.uploads import attachment_name, channel_of, resolve_served, save_upload

UPLOAD_OVERHEAD = 64 * 1024  # multipart framing around the file
DRAIN_LIMIT = 64 * 1024 * 1024  # of a refused upload, read and dropped to keep the connection
INLINE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip


@blueprint.get("/api/sessions")
@api()
def sessions_list() -> Response:
    return jsonify(list_sessions(web_transport().config.data_dir))


@blueprint.post("/api/sessions")
@api(changes=True)
def sessions_create() -> tuple[Response, int]:
    transport = web_transport()
    session = secrets.token_urlsafe(12)
    resolve_channel_dir(transport.config.data_dir, channel_of(session), create=True)
    return jsonify({"id": session}), 201


@blueprint.get("/api/sessions/<session>/history")
@api()
def sessions_history(session: str) -> Response:
    channel = existing_channel(session)
    transport = web_transport()
    running = transport.engine.is_running(channel)
    messages = conversation(transport.engine.sessions, channel, running=running)
    return jsonify({"id": session, "messages": messages})


@blueprint.get("/api/agents")
@api()
def agents() -> Response:
    engine = web_transport().engine
    names = registry_for(engine.settings).names()
    listed: list[dict[str, Any]] = [{"name": name} for name in sorted(names)]
    # Custom agents (spec 004) join the same list: name, label and readiness, never URLs.
    return jsonify(listed + picker_entries(engine))


@blueprint.post("/api/sessions/<session>/uploads")
@api(changes=True)
def upload(session: str) -> tuple[Response, int] | Response:
    transport = web_transport()
    channel = existing_channel(session)
    limit = transport.config.max_upload_bytes
    declared = request.content_length
    if declared is not None and declared > limit + UPLOAD_OVERHEAD:
        _drain(declared)
        return error_response(f"the file is larger than {limit} bytes", "payload_too_large", 413)
    request.max_content_length = limit + UPLOAD_OVERHEAD  # a body longer than declared: 413
    file = request.files.get("file")
    if file is None or not file.filename:
        return error_response("send the file in the multipart field 'file'", "missing_file", 400)
    saved = save_upload(transport.config.data_dir, channel, file.stream, file.filename, limit)
    return jsonify(saved), 201


def _drain(declared: int) -> None:
    """Read and drop a refused body (up to ``DRAIN_LIMIT``) before answering. gunicorn drains
    only 64 KiB of an unread body and then closes the kept-alive connection under the browser,
    whose next request on it would fail; a bigger body than the cap is cut off all the same."""
    stream = request.environ.get("wsgi.input")
    left = min(declared, DRAIN_LIMIT)
    while stream is not None and left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        left -= len(chunk)


@blueprint.get("/api/sessions/<session>/files/<path:relative>")
@api()
def download(session: str, relative: str) -> Response:
    path = resolve_served(web_transport().config.data_dir, channel_of(session), relative)
    response = send_file(
        path,
        mimetype=INLINE_TYPES.get(path.suffix.lower(), "application/octet-stream"),
        as_attachment=True,
        download_name=attachment_name(path.name),
        max_age=0,
    )
    return response

"""A test-only Iris plugin, loaded by a served Iris only when a test puts this folder on its
``PYTHONPATH`` (the ``.dist-info`` beside it declares the ``iris`` entry point).

It adds two routes to the internal API (behind the API token) that do what the engine's
sub-agent code does, so the Web UI's side of it can be tested in a real ``iris serve`` before
anything spawns a real sub-agent:

- ``POST /test/notify`` ``{"channel", "event"}``: ``Engine.notify(channel, event)``;
- ``POST /test/announce`` ``{"channel", "text", "key", "agentId"}``: the announce, logged by
  the engine's session store as the engine logs it, then shown by the channel's transport
  (``show_logged_message``). Returns ``{"id": <the message id>}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from iris_runtime import hookimpl
from iris_runtime.engine.transport import LoggedMessagePoster

blueprint = Blueprint("iris_test_notify", __name__)


def _engine() -> Any:
    return current_app.extensions["iris"].engine


@blueprint.post("/test/notify")
def notify() -> ResponseReturnValue:
    body = request.get_json(force=True)
    _engine().notify(str(body["channel"]), dict(body["event"]))
    return jsonify({"ok": True})


@blueprint.post("/test/announce")
def announce() -> ResponseReturnValue:
    body = request.get_json(force=True)
    channel, text = str(body["channel"]), str(body["text"])
    engine = _engine()
    engine.sessions.append_message(
        channel,
        "assistant",
        text,
        announce=str(body["key"]),
        posted=True,
        agent=f"subagent:{body.get('agentId', 'main')}",
    )
    transport = engine.transports.owner(channel)
    assert isinstance(transport, LoggedMessagePoster)
    return jsonify({"id": transport.show_logged_message(channel, text, body.get("thread"))})


@hookimpl
def register_blueprints(register: Callable[..., None]) -> None:
    register(blueprint, surface="api")

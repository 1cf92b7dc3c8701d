"""Flask apps for each port, and the gunicorn app factory ``create_app``."""

from __future__ import annotations

import atexit
import logging

from flask import Flask

from iris_runtime.agents.registry import registry_for
from iris_runtime.bridge.service import BridgeService
from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings, ensure_api_token
from iris_runtime.plugins import PluginHost
from iris_runtime.runtime import Runtime
from iris_runtime.web.api import (
    channel_modes,
    channels,
    custom_agents,
    escalate,
    events,
    health,
    secrets,
    sessions,
)
from iris_runtime.web.auth import require_bearer_token
from iris_runtime.web.bridge_app import create_bridge_app
from iris_runtime.web.capacity import HeldRequests
from iris_runtime.web.dispatch import PortDispatcher, WSGIApp, not_found_app
from iris_runtime.web.errors import install_error_handlers
from iris_runtime.web.slots import EXTENSION

log = logging.getLogger(__name__)


def _flask(name: str, runtime: Runtime, held: HeldRequests | None) -> Flask:
    app = Flask(name, static_folder=None)  # serves no files: nothing public by accident
    app.config["MAX_CONTENT_LENGTH"] = runtime.settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["iris"] = runtime
    app.extensions[EXTENSION] = held or HeldRequests.from_settings(runtime.settings)
    install_error_handlers(app)
    return app


def create_api_app(runtime: Runtime, held: HeldRequests | None = None) -> Flask:
    app = _flask("iris.api", runtime, held)
    require_bearer_token(app, runtime.settings.api_token, registry_for(runtime.settings))
    for blueprint in (
        health.blueprint,
        sessions.blueprint,
        channels.blueprint,
        channel_modes.blueprint,
        escalate.blueprint,
        secrets.blueprint,
        events.blueprint,
        custom_agents.blueprint,
    ):
        app.register_blueprint(blueprint)
    for entry in runtime.host.blueprints():
        if entry.surface == "api":
            app.register_blueprint(entry.resolve())
    return app


def create_webui_app(runtime: Runtime, held: HeldRequests | None = None) -> Flask | None:
    entries = [e for e in runtime.host.blueprints() if e.surface == "webui"]
    if not entries:
        log.warning("IRIS_WEBUI_PORT is set but no Web UI plugin is installed")
        return None
    app = _flask("iris.webui", runtime, held)
    for entry in entries:
        app.register_blueprint(entry.resolve())
    return app


def build_dispatcher(runtime: Runtime) -> PortDispatcher:
    settings = runtime.settings
    held = HeldRequests.from_settings(settings)  # one budget for every port of this process
    apps: dict[int, WSGIApp] = {settings.api_port: create_api_app(runtime, held)}
    if settings.webui_port:
        apps[settings.webui_port] = create_webui_app(runtime, held) or not_found_app
    if settings.bridge_port:
        apps[settings.bridge_port] = create_bridge_app(
            bridge_service(runtime), settings.max_body_bytes, held
        )
    return PortDispatcher(apps, runtime)


def bridge_service(runtime: Runtime) -> BridgeService:
    transport = runtime.engine.transports.get(BridgeTransport.transport_id)
    assert isinstance(transport, BridgeTransport)
    service = BridgeService(transport, runtime.settings)
    runtime.on_start(service.start)
    runtime.on_stop(service.stop)
    return service


def create_app(
    settings: Settings | None = None, *, start: bool = True, host: PluginHost | None = None
) -> PortDispatcher:
    """The gunicorn app factory: build the runtime in this (worker) process and start it.

    ``host`` is a plugin host already loaded (by ``iris serve`` before forking), so the worker
    does not load every plugin a second time."""
    settings = ensure_api_token(settings or Settings.from_env())
    runtime = Runtime.build(settings, host)
    dispatcher = build_dispatcher(runtime)
    if start:
        runtime.start()
        atexit.register(runtime.stop)
    return dispatcher

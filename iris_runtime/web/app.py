"""Flask apps for each port, and the gunicorn app factory ``create_app``."""

from __future__ import annotations

import atexit
import logging

from flask import Flask

from iris_runtime.config import Settings, ensure_api_token
from iris_runtime.runtime import Runtime
from iris_runtime.web.api import channels, health, sessions
from iris_runtime.web.auth import require_bearer_token
from iris_runtime.web.dispatch import PortDispatcher, WSGIApp, not_found_app
from iris_runtime.web.errors import install_error_handlers

log = logging.getLogger(__name__)


def _flask(name: str, runtime: Runtime) -> Flask:
    app = Flask(name, static_folder=None)  # serves no files: nothing public by accident
    app.config["MAX_CONTENT_LENGTH"] = runtime.settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["iris"] = runtime
    install_error_handlers(app)
    return app


def create_api_app(runtime: Runtime) -> Flask:
    app = _flask("iris.api", runtime)
    require_bearer_token(app, runtime.settings.api_token)
    for blueprint in (health.blueprint, sessions.blueprint, channels.blueprint):
        app.register_blueprint(blueprint)
    for entry in runtime.host.blueprints():
        if entry.surface == "api":
            app.register_blueprint(entry.blueprint)
    return app


def create_webui_app(runtime: Runtime) -> Flask | None:
    entries = [e for e in runtime.host.blueprints() if e.surface == "webui"]
    if not entries:
        log.warning("IRIS_WEBUI_PORT is set but no Web UI plugin is installed")
        return None
    app = _flask("iris.webui", runtime)
    for entry in entries:
        app.register_blueprint(entry.blueprint)
    return app


def build_dispatcher(runtime: Runtime) -> PortDispatcher:
    settings = runtime.settings
    apps: dict[int, WSGIApp] = {settings.api_port: create_api_app(runtime)}
    if settings.webui_port:
        apps[settings.webui_port] = create_webui_app(runtime) or not_found_app
    if settings.bridge_port:
        # The bridge server (POST /bridge, GET /bridge/jobs/<id>) answers here; until then 404.
        apps[settings.bridge_port] = not_found_app
    return PortDispatcher(apps, runtime)


def create_app(settings: Settings | None = None, *, start: bool = True) -> PortDispatcher:
    """The gunicorn app factory: build the runtime in this (worker) process and start it."""
    settings = ensure_api_token(settings or Settings.from_env())
    runtime = Runtime.build(settings)
    dispatcher = build_dispatcher(runtime)
    if start:
        runtime.start()
        atexit.register(runtime.stop)
    return dispatcher

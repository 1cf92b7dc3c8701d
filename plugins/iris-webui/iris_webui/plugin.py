"""Registers the Web UI: its transport (only when ``IRIS_WEBUI_PORT`` is set), its pages on the
``webui`` surface, and the ``?agent=`` router. Without the port the plugin serves nothing and
registers no transport; it still declares that ``WEBUI-`` channel ids are its own, so they are
refused while the Web UI is off instead of being taken by the bridge.

``issue_login_link`` (from :mod:`iris_webui.login_link`) is looked up here by ``iris serve``
(the gunicorn master) before it forks: it makes the one-time login key and returns the line to
print; ``iris webui link`` (``cli``) prints a fresh link any time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import ChannelShape
from iris_webui.login_link import issue_login_link

__all__ = [
    "engine_started",
    "issue_login_link",
    "register_blueprints",
    "register_channel_shapes",
    "register_commands",
    "register_transports",
]

if TYPE_CHECKING:
    from flask import Blueprint

TRANSPORT_ID = "webui"


@hookimpl
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    if not settings.webui_port:
        return
    from iris_webui.config import WebConfig  # only paid for when configured

    config = WebConfig.from_settings(settings)
    assert config is not None

    def build(engine: Engine) -> object:
        from iris_webui.transport import WebTransport

        return WebTransport(engine, config)

    # Not a fallback: consulted before the bridge, so WEBUI-* channels resolve to us.
    register(build)


@hookimpl
def register_channel_shapes(register: Callable[[ChannelShape], None]) -> None:
    # Port or no port: WEBUI-* ids are never the bridge's, so they are refused while it is off.
    from iris_webui.profile import CHANNEL_PREFIX
    from iris_webui.uploads import CHANNEL_ID

    register(
        ChannelShape.prefixed(
            TRANSPORT_ID,
            CHANNEL_PREFIX,
            valid=CHANNEL_ID,
            rule="WEBUI-<conversation id>: 1-64 letters, digits, '_' or '-'",
        )
    )


@hookimpl
def register_blueprints(register: Callable[..., None]) -> None:
    # A function, called only when the Web UI port is served: the routes pull in the
    # WebSocket stack (flask-sock, simple-websocket, asyncio), which an Iris without it skips.
    register(_blueprint, surface="webui")


def _blueprint() -> Blueprint:
    from iris_webui.routes import blueprint  # with every route joined

    return blueprint


@hookimpl(tryfirst=True)  # the pinned router must be in place before anything is routed
def engine_started(engine: Engine) -> None:
    transport = next((t for t in engine.transports.all() if t.transport_id == TRANSPORT_ID), None)
    if transport is None:
        return
    from iris_runtime.agents.registry import registry_for
    from iris_runtime.bridge.routing import AgentMentionRouter
    from iris_runtime.custom_agents.router import ask_pinned
    from iris_webui.routing import PinnedAgentRouter
    from iris_webui.transport import WebTransport

    assert isinstance(transport, WebTransport)
    registry = registry_for(engine.settings)
    mentions = AgentMentionRouter(engine.settings, registry, engine.sessions)
    custom = functools.partial(ask_pinned, engine)
    engine.add_router(PinnedAgentRouter(transport, registry, mentions, custom))


@hookimpl
def register_commands(cli: click.Group) -> None:
    from iris_webui.cli import webui

    cli.add_command(webui)

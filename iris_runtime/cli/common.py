"""Helpers shared by subcommands."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import click

from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError, IrisError
from iris_runtime.plugins import PluginHost

P = ParamSpec("P")
R = TypeVar("R")

_hosts: dict[Settings, PluginHost] = {}


def plugin_host(settings: Settings) -> PluginHost:
    """One plugin host per configuration per process, so load errors are reported once."""
    if settings not in _hosts:
        _hosts[settings] = PluginHost(settings)
    return _hosts[settings]


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc.message}") from None


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound right now, or None when it can."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def listen_ports(settings: Settings) -> dict[str, int]:
    ports = {"IRIS_API_PORT": settings.api_port}
    if settings.webui_port:
        ports["IRIS_WEBUI_PORT"] = settings.webui_port
    if settings.bridge_port:
        ports["BRIDGE_PORT"] = settings.bridge_port
    return ports


def clean_errors(func: Callable[P, R]) -> Callable[P, R]:
    """An IrisError is the user's problem to fix: show its message, not a traceback."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except IrisError as exc:
            raise click.ClickException(exc.message) from None

    return wrapper

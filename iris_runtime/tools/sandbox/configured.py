"""The sandbox level one Iris is configured with (``IRIS_SANDBOX``): proven by ``iris serve``
before gunicorn starts, opened and checked again in the worker that runs the tools."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iris_runtime.config import Settings
from iris_runtime.engine.skills import discover_skills, secrets_for_skills
from iris_runtime.errors import ConfigError
from iris_runtime.tools.sandbox.base import RunSecrets, Sandbox, SandboxUnavailable
from iris_runtime.tools.sandbox.select import open_sandbox, prove


def prove_configured(settings: Settings, levels: Mapping[str, Any]) -> None:
    """Open the level and run its probe: a level that cannot run here, or whose probe shows the
    host, stops start-up with the reason (never a weaker level)."""
    try:
        sandbox = open_sandbox(settings.sandbox, levels, settings.data_dir, settings.env)
        prove(sandbox, settings.data_dir)
    except SandboxUnavailable as exc:
        raise ConfigError(f"IRIS_SANDBOX={settings.sandbox}: {exc.message}") from None


def configured_sandbox(
    settings: Settings, levels: Mapping[str, Any], plugin_skills: list[Path]
) -> Sandbox:
    """The level, opened and checked (``iris serve`` has proven it already)."""
    try:
        return open_sandbox(
            settings.sandbox,
            levels,
            settings.data_dir,
            settings.env,
            run_secrets_for(settings, plugin_skills),
        )
    except SandboxUnavailable as exc:
        raise ConfigError(f"IRIS_SANDBOX={settings.sandbox}: {exc.message}") from None


def run_secrets_for(settings: Settings, plugin_skills: list[Path]) -> RunSecrets | None:
    """A sandboxed run's way to the broker, where this process hosts it (a sub-agent's broker
    is its parent's, which knows nothing of this process's runs)."""
    if settings.secret_broker_url:
        return None
    wildcard = settings.api_host in {"0.0.0.0", "::", ""}
    url = f"http://{'127.0.0.1' if wildcard else settings.api_host}:{settings.api_port}"
    return RunSecrets(
        url, lambda: secrets_for_skills(discover_skills(settings.workspace, plugin_skills))
    )

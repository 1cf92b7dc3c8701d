"""channels.json for the CLI and ``iris doctor``: read it the way a serving Iris would, and
edit it atomically (the whole new file is checked, then written to a temp file and renamed, so
a serving Iris never reads half a file and never sees a configuration it would reject)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from iris_runtime.channel_modes.admin import describe
from iris_runtime.channel_modes.agents import offline_agent_names
from iris_runtime.config import Settings
from iris_runtime.data_layout import CHANNELS_JSON
from iris_runtime.engine.dispatch import ChannelRule, DispatchConfig
from iris_runtime.engine.dispatch_config import (
    DEFAULTS_KEY,
    missing_agents,
    parse_channels,
    read_channels,
)
from iris_runtime.errors import ConfigError


def channels_path(settings: Settings) -> Path:
    return settings.data_dir / CHANNELS_JSON


def load(settings: Settings) -> DispatchConfig:
    """The file as a serving Iris reads it: whether its agents exist is not checked (see
    :func:`channels_summary` for that warning), so every entry stays editable."""
    return read_channels(channels_path(settings))


def channels_summary(settings: Settings) -> tuple[str, str]:
    """``(ok|warn|fail, detail)`` for ``iris doctor`` (warn: a passthrough names an unknown
    agent)."""
    path = channels_path(settings)
    try:
        config = load(settings)
    except ConfigError as exc:
        return "fail", (
            f"{path}: {exc.message}; a serving Iris keeps its previous configuration (with none "
            "since it started, it ignores the channels the file lists)"
        )
    if not path.exists():
        return "ok", f"no {path}: every channel keeps its transport's usual behaviour"
    modes = [rule.mode for rule in config.channels.values()]
    counts = ", ".join(f"{modes.count(m)} {m}" for m in sorted(set(modes))) or "no channels"
    default = f"; other channels {config.defaults.mode}" if config.defaults else ""
    missing = missing_agents(config, offline_agent_names(settings))
    if missing:
        return "warn", (
            f"{path}: {counts}{default}; passthrough to unknown agent(s) {', '.join(missing)} "
            '(answered "not available" until it is registered or loaded)'
        )
    return "ok", f"{path}: {counts}{default}"


def config_json(config: DispatchConfig) -> dict[str, Any]:
    out: dict[str, Any] = {c: r.as_json() for c, r in sorted(config.channels.items())}
    if config.defaults is not None:
        out[DEFAULTS_KEY] = config.defaults.as_json()
    return out


def set_rule(settings: Settings, channel: str, rule: ChannelRule) -> DispatchConfig:
    """Give ``channel`` the ``rule``; the agent it names (only this entry's) must exist."""
    if rule.agent is not None:
        unknown = missing_agents(DispatchConfig({channel: rule}), offline_agent_names(settings))
        if unknown:
            raise ConfigError(
                f"unknown agent(s) {', '.join(unknown)}: a passthrough names a registered "
                "sub-agent or a custom agent in agents.d"
            )
    current = config_json(load(settings))
    current[channel] = rule.as_json()
    return _write(settings, current)


def unset_rule(settings: Settings, channel: str) -> bool:
    current = config_json(load(settings))
    if current.pop(channel, None) is None:
        return False
    _write(settings, current)
    return True


def _write(settings: Settings, data: dict[str, Any]) -> DispatchConfig:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    config = parse_channels(text)  # never write what Iris rejects
    path = channels_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".channels.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return config


__all__ = ["channels_summary", "config_json", "describe", "load", "set_rule", "unset_rule"]

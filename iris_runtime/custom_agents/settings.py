"""Custom agents' settings, read from the same environment as :class:`Settings`.

They live here rather than in ``config.py`` because nothing else reads them; ``iris doctor``
shows them through :func:`describe`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError

REACH_SOCKET_NAME = "reach.sock"
# The spec's numbers: 30 notes per five minutes for the whole machine, a burst of 10.
RATE_PER_WINDOW = 30
RATE_BURST = 10


def _ms(env: Mapping[str, str], name: str, default_ms: int) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default_ms / 1000.0
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer (milliseconds), got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, got {value}")
    return value / 1000.0


def _port(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(f"{name} must be a TCP port (1-65535), got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class CustomAgentSettings:
    manifests_dir: Path  # IRIS_CUSTOM_AGENTS_DIR, default <data>/agents.d
    reach_socket: Path  # IRIS_REACH_SOCKET, default <data>/run/reach.sock
    reach_group: str | None  # IRIS_REACH_GROUP: the agents' group, given access to the socket
    silence_seconds: float  # IRIS_RELAY_SILENCE_MS: a turn with no activity this long ends
    post_timeout_seconds: float  # IRIS_RELAY_POST_TIMEOUT_MS: how long a relay may take to accept
    watch_seconds: float  # IRIS_CUSTOM_AGENTS_POLL_MS: how often agents.d is looked at
    rate_window_seconds: float  # IRIS_REACH_RATE_WINDOW_MS: the rate limit's window (5 min)
    default_chat: str | None  # IRIS_DEFAULT_CHAT: the channel a note without a chat goes to
    relay_inbound_port: int | None  # IRIS_RELAY_INBOUND_PORT: Iris answers as a relay agent here
    upstream_reach_socket: Path | None  # where that host's reach socket is

    @classmethod
    def from_settings(cls, settings: Settings) -> CustomAgentSettings:
        env = settings.env or os.environ
        data = settings.data_dir
        manifests = env.get("IRIS_CUSTOM_AGENTS_DIR", "").strip()
        socket_path = env.get("IRIS_REACH_SOCKET", "").strip()
        upstream = (
            env.get("IRIS_UPSTREAM_REACH_SOCKET", "").strip()
            or env.get("WIRELING_REACH_SOCK", "").strip()
        )
        return cls(
            manifests_dir=Path(manifests).expanduser()
            if manifests
            else data / data_layout.AGENTS_D,
            reach_socket=(
                Path(socket_path).expanduser()
                if socket_path
                else data / data_layout.RUN_DIR / REACH_SOCKET_NAME
            ),
            reach_group=env.get("IRIS_REACH_GROUP", "").strip() or None,
            silence_seconds=_ms(env, "IRIS_RELAY_SILENCE_MS", 300_000),
            post_timeout_seconds=_ms(env, "IRIS_RELAY_POST_TIMEOUT_MS", 10_000),
            watch_seconds=_ms(env, "IRIS_CUSTOM_AGENTS_POLL_MS", 500),
            rate_window_seconds=_ms(env, "IRIS_REACH_RATE_WINDOW_MS", 300_000),
            default_chat=env.get("IRIS_DEFAULT_CHAT", "").strip() or None,
            relay_inbound_port=_port(env, "IRIS_RELAY_INBOUND_PORT"),
            upstream_reach_socket=Path(upstream) if upstream else None,
        )


def describe(config: CustomAgentSettings) -> dict[str, object]:
    """The settings as ``iris doctor`` shows them (none of them is a secret)."""
    return {
        "manifests_dir": str(config.manifests_dir),
        "reach_socket": str(config.reach_socket),
        "silence_seconds": config.silence_seconds,
        "default_chat": config.default_chat or "(none)",
    }

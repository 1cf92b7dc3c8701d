"""Custom agents' settings, read from the same environment as :class:`Settings`.

They live here rather than in ``config.py`` because nothing else reads them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.env_values import env_ms, env_port

REACH_SOCKET_NAME = "reach.sock"
# The spec's numbers: 30 notes per five minutes for the whole machine, a burst of 10.
RATE_PER_WINDOW = 30
RATE_BURST = 10


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
    acp_start_seconds: float = 30.0  # IRIS_ACP_START_TIMEOUT_MS: start, initialize, session
    acp_silence_seconds: float = 300.0  # IRIS_ACP_SILENCE_MS: a prompt with no update this long
    acp_cancel_grace_seconds: float = 2.0  # IRIS_ACP_CANCEL_GRACE_MS: cancel, then SIGKILL

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
            silence_seconds=env_ms(env, "IRIS_RELAY_SILENCE_MS", 300_000),
            post_timeout_seconds=env_ms(env, "IRIS_RELAY_POST_TIMEOUT_MS", 10_000),
            watch_seconds=env_ms(env, "IRIS_CUSTOM_AGENTS_POLL_MS", 500),
            rate_window_seconds=env_ms(env, "IRIS_REACH_RATE_WINDOW_MS", 300_000),
            default_chat=env.get("IRIS_DEFAULT_CHAT", "").strip() or None,
            relay_inbound_port=env_port(env, "IRIS_RELAY_INBOUND_PORT"),
            upstream_reach_socket=Path(upstream) if upstream else None,
            acp_start_seconds=env_ms(env, "IRIS_ACP_START_TIMEOUT_MS", 30_000),
            acp_silence_seconds=env_ms(env, "IRIS_ACP_SILENCE_MS", 300_000),
            acp_cancel_grace_seconds=env_ms(env, "IRIS_ACP_CANCEL_GRACE_MS", 2_000),
        )

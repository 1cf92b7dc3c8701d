"""What it takes to run one sub-agent, and the interface every way of running one implements.

An :class:`AgentLaunch` is fully resolved at spawn time: literal environment values (identity,
ports, secrets mode, broker URL, provider, model, and the chat-platform tokens set empty), the
command, the agent's home. It never holds a secret value: the agent's own API token lives in
``<home>/api-token`` (mode 0600), where ``iris serve`` picks it up, and its LLM key comes from the
parent's secret broker. So a launch can be written into a world-readable unit file or a database
row as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from iris_runtime.tls import url_for

Progress = Callable[[str], None]
"""Receives one human-readable line per step ("starting iris-agent-digest.service")."""

# Set empty on every agent, whatever the parent has: a bridge-only agent must never log in as
# Iris's own Slack app or Telegram bot (two processes on one bot fight over its connection).
PLATFORM_TOKEN_VARS = ("IRIS_SLACK_APP_TOKEN", "IRIS_SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN")
# Who the agent is and how it is wired to Iris: always set by spawn (or the Docker module), never
# by a caller's extra settings.
IDENTITY_VARS = frozenset(
    {
        "AGENT_NAME",
        "BRIDGE_PORT",
        "IRIS_API_PORT",
        "IRIS_API_HOST",
        "IRIS_DATA_DIR",
        "IRIS_SECRETS_MODE",
        "IRIS_SECRET_BROKER_URL",
        *PLATFORM_TOKEN_VARS,
    }
)


def no_progress(line: str) -> None:
    """A Progress that shows nothing."""


@dataclass(frozen=True)
class AgentLaunch:
    name: str
    home: Path  # the agent's IRIS_DATA_DIR: CONSTITUTION.md, MEMORY.md, skills/, api-token
    bridge_port: int
    api_port: int  # bridge_port + 100: where /health lives
    command: tuple[str, ...]  # absolute argv that runs ``iris serve`` for this agent
    environment: Mapping[str, str] = field(default_factory=dict)  # literal, no secret values
    # Parent files an agent process must not be able to read even as the same Unix user
    # (the secret store, agents.json, Iris's API token); service units hide them.
    protected_paths: tuple[Path, ...] = ()
    # Where Iris reaches the bridge: this host's loopback, or (an agent host) the address
    # IRIS_BRIDGE_HOST names, over TLS when the agent has a certificate.
    bridge_host: str = "127.0.0.1"
    bridge_scheme: str = "http"

    @property
    def unit_name(self) -> str:
        return f"iris-agent-{self.name}.service"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}/health"

    @property
    def bridge_url(self) -> str:
        return url_for(self.bridge_scheme, self.bridge_host, self.bridge_port)


class AgentService(Protocol):
    """One way of keeping an agent process running (a systemd unit, a supervised child)."""

    kind: str  # "systemd" | "process"

    def install(self, launch: AgentLaunch, progress: Progress) -> None:
        """Make the agent run now and after restarts. Raises IrisError with the reason; on
        failure whatever it created is removed again (the caller also calls ``remove``)."""
        ...

    def remove(self, name: str, progress: Progress) -> bool:
        """Stop the agent and delete what ``install`` created. Idempotent; True when there
        was something to remove."""
        ...

    def start(self, name: str, progress: Progress) -> None:
        """Start an installed agent that is not running (stopped, failed) with what ``install``
        recorded; returns once it runs. Raises IrisError with the reason."""
        ...

    def exists(self, name: str) -> bool:
        """Whether anything of this agent is installed (a unit file, a supervised row)."""
        ...

"""What a spawned agent is started with: its command, its environment, where its bridge is
reached, and which of Iris's paths its unit hides.

The environment is literal and holds no secret: Iris's non-secret provider settings, the
caller's checked ``--env`` values, then the agent's identity and wiring, which nothing else may
set. Its API token stays in a file in its home.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from iris_runtime.agents.home import AgentRecord
from iris_runtime.agents.spawn_checks import INHERITED_VARS
from iris_runtime.agents.spawn_config import SpawnConfig
from iris_runtime.config import TOKEN_FILE_NAME, Settings
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch
from iris_runtime.tls import is_loopback

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def agent_secrets_mode(settings: Settings) -> str:
    """The secrets mode a new agent runs in. Agents always resolve secrets through Iris's
    broker, which serves ``env`` mode too, so the agent itself only needs store or proxy."""
    return settings.secrets_mode if settings.secrets_mode == "proxy" else "store"


def agent_tls(settings: Settings, config: SpawnConfig) -> tuple[str, str] | None:
    """The certificate and key of this host's agents' bridges (``IRIS_AGENT_TLS_CERT`` and
    ``IRIS_AGENT_TLS_KEY``) when those bridges face the network; None on loopback. Never
    Iris's own ``IRIS_TLS_CERT``/``IRIS_TLS_KEY``: an agent can read what it is given."""
    host = settings.bridge_host or "127.0.0.1"
    if config.agent_tls is None or is_loopback(host):
        return None
    return config.agent_tls


def bridge_address(settings: Settings, config: SpawnConfig) -> dict[str, str]:
    """Where this host's agents' bridges are reached (see ``AgentLaunch.bridge_url``)."""
    host = settings.bridge_host or "127.0.0.1"
    scheme = "https" if agent_tls(settings, config) else "http"
    return {"bridge_host": host, "bridge_scheme": scheme}


def protected_paths(settings: Settings, config: SpawnConfig) -> tuple[Path, ...]:
    """Iris's data dir and the agents dir are hidden whole (a unit puts an empty read-only
    tmpfs over each and binds only the agent's own home back), which also covers files Iris
    replaces atomically; the env file is hidden on its own when it lives outside them."""
    paths = [settings.data_dir.resolve(), config.agents_dir.resolve()]
    env_file = settings.env_file
    if env_file is not None and not any(env_file.resolve().is_relative_to(p) for p in paths):
        paths.append(env_file.resolve())
    return tuple(paths)


def launch_for(
    settings: Settings,
    config: SpawnConfig,
    record: AgentRecord,
    home: Path,
    extra_env: Mapping[str, str],
) -> AgentLaunch:
    """How to start the agent ``record`` describes, with its home at ``home``."""
    env: dict[str, str] = {
        name: settings.env[name].strip()
        for name in INHERITED_VARS
        if settings.env.get(name, "").strip()
    }
    env.update(extra_env)
    env.update(
        {
            "AGENT_NAME": record.name,
            "BRIDGE_PORT": str(record.bridge_port),
            "IRIS_API_PORT": str(record.api_port),
            "IRIS_API_HOST": "127.0.0.1",
            "IRIS_DATA_DIR": str(home),
            "IRIS_SECRETS_MODE": agent_secrets_mode(settings),
            "IRIS_SECRET_BROKER_URL": config.broker_url,
            "IRIS_PROVIDER": record.provider,
            "IRIS_MODEL": record.model,
            **dict.fromkeys(PLATFORM_TOKEN_VARS, ""),
        }
    )
    if record.sandbox != "host":  # unset is host: default agents' units stay as they were
        env["IRIS_SANDBOX"] = record.sandbox
    if record.manager == "docker":
        # A container sees none of the host's paths (its broker is reached over the
        # Docker bridge network); a CA path it cannot read would stop it at startup.
        env.pop("IRIS_TLS_CACERT", None)
    elif launch_tls := agent_tls(settings, config):
        # The agent host's agent certificate becomes the agent's own bridge certificate.
        # Every agent of this host can read that key (its unit loads it as a credential).
        env["IRIS_TLS_CERT"], env["IRIS_TLS_KEY"] = launch_tls
    if record.manager != "docker":
        # A path, not the token: skills (get-secret) read it from the agent's environment.
        env["IRIS_API_TOKEN_FILE"] = str(home / TOKEN_FILE_NAME)
        # Skills' commands (get-secret) are installed beside Iris's own Python.
        env["PATH"] = f"{Path(sys.executable).parent}:{SYSTEM_PATH}"
    return AgentLaunch(
        name=record.name,
        home=home,
        bridge_port=record.bridge_port,
        api_port=record.api_port,
        command=(sys.executable, "-m", "iris_runtime", "serve"),
        environment=env,
        protected_paths=protected_paths(settings, config),
        **bridge_address(settings, config),
    )

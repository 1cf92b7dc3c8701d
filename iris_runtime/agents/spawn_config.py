"""Where and how ``iris agents spawn`` provisions sub-agents, read from the environment.

Kept apart from :class:`~iris_runtime.config.Settings` because only the spawn path needs it; it
reads the same environment snapshot (``settings.env``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.env_values import env_float
from iris_runtime.errors import ConfigError
from iris_runtime.tls import plain_http_refusal

DEFAULT_REPO_DIR = Path("/iris/repo")
DEFAULT_PORT_RANGE = "4000-4099"
SERVICE_MANAGERS = ("auto", "systemd", "process")
API_PORT_OFFSET = 100  # a sub-agent's internal API (and /health) lives at bridge port + 100


@dataclass(frozen=True)
class PortRange:
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        first, sep, last = text.strip().partition("-")
        try:
            low, high = int(first), int(last if sep else first)
        except ValueError:
            raise ConfigError(f"IRIS_AGENT_PORTS must look like 4000-4099, not {text!r}") from None
        if not 1024 <= low <= high or high + API_PORT_OFFSET > 65535:
            raise ConfigError(
                f"IRIS_AGENT_PORTS {text!r}: need 1024 <= first <= last and last + "
                f"{API_PORT_OFFSET} <= 65535 (the API port is the bridge port + {API_PORT_OFFSET})"
            )
        return cls(low, high)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.first, self.last + 1))

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass(frozen=True)
class SpawnConfig:
    repo_dir: Path
    agents_dir: Path
    ports: PortRange
    service_manager: str
    unit_dir: Path
    broker_url: str
    health_timeout_seconds: float
    docker_image: str
    docker_base_image: str
    terraform_bin: str
    github_token_set: bool
    agent_user: str = "iris-agent"
    # An agent host's agents' bridge certificate and key (IRIS_AGENT_TLS_CERT/_KEY): paths.
    agent_tls: tuple[str, str] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> SpawnConfig:
        env = settings.env
        manager = _get(env, "IRIS_SERVICE_MANAGER", "auto").lower()
        if manager not in SERVICE_MANAGERS:
            choices = ", ".join(SERVICE_MANAGERS)
            raise ConfigError(f"IRIS_SERVICE_MANAGER must be one of {choices}, not {manager!r}")
        agents_dir = _get(env, "IRIS_AGENTS_DIR", "")
        broker_url = _get(env, "IRIS_AGENT_BROKER_URL", "").rstrip("/")
        # An agent host's agents reach the broker across the network: refused here, before
        # anything is created, rather than by every get-secret the agent runs.
        refusal = plain_http_refusal(
            broker_url, "IRIS_AGENT_BROKER_URL", insecure=settings.insecure_http
        )
        if refusal:
            raise ConfigError(refusal)
        agent_cert = _get(env, "IRIS_AGENT_TLS_CERT", "")
        agent_key = _get(env, "IRIS_AGENT_TLS_KEY", "")
        if bool(agent_cert) != bool(agent_key):
            raise ConfigError(
                "IRIS_AGENT_TLS_CERT and IRIS_AGENT_TLS_KEY go together: set both or neither"
            )
        return cls(
            agent_tls=(agent_cert, agent_key) if agent_cert else None,
            repo_dir=Path(_get(env, "IRIS_REPO_DIR", str(DEFAULT_REPO_DIR))).expanduser(),
            agents_dir=(
                Path(agents_dir).expanduser()
                if agents_dir
                else settings.data_dir / data_layout.AGENTS_DIR
            ).resolve(),
            ports=PortRange.parse(_get(env, "IRIS_AGENT_PORTS", DEFAULT_PORT_RANGE)),
            service_manager=manager,
            unit_dir=Path(_get(env, "IRIS_SYSTEMD_UNIT_DIR", "/etc/systemd/system")),
            broker_url=broker_url or settings.local_api_url,
            health_timeout_seconds=env_float(env, "IRIS_AGENT_HEALTH_TIMEOUT_SECONDS", 60.0),
            docker_image=_get(env, "IRIS_DOCKER_IMAGE", "iris-runtime:local"),
            docker_base_image=_get(env, "IRIS_DOCKER_BASE_IMAGE", "python:3.11-slim"),
            terraform_bin=_get(env, "IRIS_TERRAFORM_BIN", "terraform"),
            agent_user=_get(env, "IRIS_AGENT_USER", "iris-agent"),
            github_token_set=bool(
                _get(env, "IRIS_GITHUB_TOKEN", "") or _get(env, "GITHUB_TOKEN", "")
            ),
        )


def _get(env: Mapping[str, str], name: str, default: str) -> str:
    return env.get(name, "").strip() or default


# Built-in levels that cannot work under a manager, and why. A plugin level is left to the
# agent's own start-up check (it stops with the reason there, never falling back).
_ROOT_LEVELS = {"gvisor": "runsc", "firecracker": "the Firecracker jailer"}
_CONTAINED_LEVELS = ("namespace", "gvisor", "firecracker", "docker")


def level_refusal(manager: str, sandbox: str) -> str | None:
    """Why an agent under ``manager`` cannot run its tools at ``sandbox`` (None when it can)."""
    level = sandbox.partition(":")[0]
    if manager == "systemd" and level in _ROOT_LEVELS:
        return (
            f"--sandbox {sandbox}: {_ROOT_LEVELS[level]} must run as root, and a systemd agent "
            "runs unprivileged under its hardened unit. Choose namespace, or "
            "--service-manager process under a root Iris"
        )
    if manager == "systemd" and level == "docker":
        return (
            f"--sandbox {sandbox}: the docker level needs the Docker socket, which is root on "
            "this host, and a systemd agent never gets it. Choose namespace, or "
            "--service-manager process"
        )
    if manager == "docker" and level in _CONTAINED_LEVELS:
        return (
            f"--sandbox {sandbox}: a Docker agent runs in a container of its own, whose default "
            "seccomp profile and missing devices and sockets stop this level; its tools already "
            "run inside that container (--sandbox host). Choose --mode service for this level"
        )
    return None

"""Configuration: one frozen :class:`Settings` built from the environment.

This is the only module that reads ``os.environ``. Everything else receives a ``Settings``. It
imports no Flask so the engine and the CLI can use it freely.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from iris_runtime import data_layout
from iris_runtime.env_values import (
    credential,
    env_flag,
    env_float,
    env_int,
    env_list,
    env_ms,
    env_port,
)
from iris_runtime.errors import ConfigError
from iris_runtime.tls import (
    INSECURE_VARIABLE,
    TLS_KEY_CREDENTIAL,
    cacert_problem,
    is_loopback,
    plain_http_refusal,
    url_for,
)

DEFAULT_DATA_DIR = ".iris-data"
TOKEN_FILE_NAME = data_layout.API_TOKEN

# Field names whose values never leave the process unmasked (doctor, logs, reprs).
SECRET_FIELDS = frozenset({"api_token", "vault_token", "vault_secret_id"})
SECRETS_MODES = ("store", "proxy", "env")


@dataclass(frozen=True)
class Settings:
    """The effective configuration of one Iris process."""

    data_dir: Path
    api_host: str = "127.0.0.1"
    api_port: int = 3000
    api_token: str = field(default="", repr=False)
    webui_port: int | None = None
    bridge_port: int | None = None
    agent_name: str | None = None
    provider: str = "offline"
    model: str = ""
    subagent_model: str = ""
    provider_max_retries: int = 4
    provider_stream_timeout_seconds: float = 120.0
    max_body_bytes: int = 25 * 1024 * 1024
    max_turns: int = 40
    threads: int = 32  # server threads for short requests, beyond the held ones' below
    max_streams: int = 1024  # open SSE streams, streamed bridge requests, Web UI sockets
    max_waits: int = 256  # requests waiting for a model: blocking message posts, plain bridge
    sse_heartbeat_seconds: float = 15.0
    io_timeout_seconds: float = 30.0  # a connection where no byte moves this long is closed
    lane_main: int = 4
    lane_subagent: int = 8
    lane_events: int = 2
    bash_timeout_seconds: float = 300.0
    tool_output_max_chars: int = 30_000
    sandbox: str = "host"
    bridge_heartbeat_seconds: float = 10.0
    bridge_idle_timeout_seconds: float = 300.0
    bridge_deadline_seconds: float = 4 * 3600.0
    bridge_job_retention_seconds: float = 72 * 3600.0
    # Across hosts (see iris_runtime.tls): where the bridge listens, this Iris's certificate on
    # listeners off loopback, the CAs it trusts when calling, and the explicit plain-HTTP switch.
    bridge_host: str = ""  # "" = IRIS_API_HOST
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_cacert: str | None = None
    insecure_http: bool = False
    escalation_channel: str | None = None
    events_poll_seconds: float = 0.5
    events_parse_grace_seconds: float = 1.0
    load_plugins: tuple[str, ...] | None = None
    trace_plugins: bool = False
    log_level: str = "info"
    # The secret broker (see iris_runtime/secrets).
    secrets_mode: str = "store"
    secret_backend: str = "file"  # noqa: S105 (a backend name)
    secret_broker_url: str | None = None
    env_file: Path | None = None
    vault_addr: str = "http://127.0.0.1:8200"
    vault_mount: str = "secret"
    vault_prefix: str = "iris"
    vault_proxy_path: str = ""
    vault_token: str = field(default="", repr=False)
    vault_role_id: str = ""
    vault_secret_id: str = field(default="", repr=False)
    vault_cacert: str | None = None
    vault_timeout_seconds: float = 5.0
    # A read-only snapshot of the environment for plugins that own their variables
    # (TELEGRAM_BOT_TOKEN and friends). Never printed.
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        agent_name = env.get("AGENT_NAME", "").strip() or None
        bridge_port = env_port(env, "BRIDGE_PORT")
        default_api_port = bridge_port + 100 if bridge_port else 3000
        data_dir = Path(env.get("IRIS_DATA_DIR", "").strip() or DEFAULT_DATA_DIR).expanduser()
        settings = cls(
            data_dir=data_dir.resolve(),
            api_host=env.get("IRIS_API_HOST", "").strip() or "127.0.0.1",
            api_port=env_port(env, "IRIS_API_PORT") or default_api_port,
            api_token=credential(env, "IRIS_API_TOKEN"),
            webui_port=env_port(env, "IRIS_WEBUI_PORT"),
            bridge_port=bridge_port,
            agent_name=agent_name,
            provider=env.get("IRIS_PROVIDER", "").strip() or "offline",
            model=env.get("IRIS_MODEL", "").strip(),
            subagent_model=env.get("IRIS_SUBAGENT_MODEL", "").strip(),
            provider_max_retries=env_int(env, "IRIS_PROVIDER_MAX_RETRIES", 4, minimum=0),
            provider_stream_timeout_seconds=env_float(
                env, "IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS", 120.0
            ),
            max_body_bytes=env_int(env, "IRIS_MAX_BODY_BYTES", 25 * 1024 * 1024, minimum=1024),
            max_turns=env_int(env, "IRIS_MAX_TURNS", 40, minimum=1),
            threads=env_int(env, "IRIS_THREADS", 32, minimum=4),
            max_streams=env_int(env, "IRIS_MAX_STREAMS", 1024, minimum=1),
            max_waits=env_int(env, "IRIS_MAX_WAITS", 256, minimum=1),
            sse_heartbeat_seconds=env_float(env, "IRIS_SSE_HEARTBEAT_SECONDS", 15.0),
            io_timeout_seconds=env_float(env, "IRIS_IO_TIMEOUT_SECONDS", 30.0),
            lane_main=env_int(env, "IRIS_LANE_MAIN", 4, minimum=1),
            lane_subagent=env_int(env, "IRIS_LANE_SUBAGENT", 8, minimum=1),
            lane_events=env_int(env, "IRIS_LANE_EVENTS", 2, minimum=1),
            bash_timeout_seconds=env_float(env, "IRIS_BASH_TIMEOUT_SECONDS", 300.0),
            tool_output_max_chars=env_int(env, "IRIS_TOOL_OUTPUT_MAX_CHARS", 30_000, minimum=100),
            sandbox=env.get("IRIS_SANDBOX", "").strip() or "host",
            bridge_heartbeat_seconds=env_ms(env, "IRIS_BRIDGE_HEARTBEAT_MS", 10_000),
            bridge_idle_timeout_seconds=env_ms(env, "IRIS_BRIDGE_IDLE_TIMEOUT_MS", 300_000),
            bridge_deadline_seconds=env_ms(env, "IRIS_BRIDGE_DEADLINE_MS", 4 * 3600_000),
            bridge_job_retention_seconds=3600
            * env_float(env, "IRIS_BRIDGE_JOB_RETENTION_HOURS", 72.0),
            escalation_channel=env.get("IRIS_ESCALATION_CHANNEL", "").strip() or None,
            events_poll_seconds=env_ms(env, "IRIS_EVENTS_POLL_MS", 500),
            events_parse_grace_seconds=env_ms(env, "IRIS_EVENTS_PARSE_GRACE_MS", 1000),
            load_plugins=env_list(env, "IRIS_LOAD_PLUGINS"),
            trace_plugins=env_flag(env, "IRIS_TRACE_PLUGINS"),
            log_level=env.get("IRIS_LOG_LEVEL", "").strip().lower() or "info",
            **_secrets_settings(env),
            **_tls_settings(env),
            env=MappingProxyType(env),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        ports = {"IRIS_API_PORT": self.api_port}
        if self.webui_port:
            ports["IRIS_WEBUI_PORT"] = self.webui_port
        if self.bridge_port:
            ports["BRIDGE_PORT"] = self.bridge_port
        if len(set(ports.values())) != len(ports):
            raise ConfigError(f"ports must differ: {ports}")
        if self.secrets_mode not in SECRETS_MODES:
            raise ConfigError(
                f"IRIS_SECRETS_MODE must be one of {', '.join(SECRETS_MODES)}, "
                f"not {self.secrets_mode!r}"
            )
        self._validate_tls()
        if self.log_level not in {"debug", "info", "warning", "error", "critical"}:
            raise ConfigError(
                f"IRIS_LOG_LEVEL must be debug/info/warning/error, not {self.log_level!r}"
            )

    def listeners(self) -> dict[str, tuple[str, int]]:
        """Every port this process binds, by variable: (host, port)."""
        out = {"IRIS_API_PORT": (self.api_host, self.api_port)}
        if self.webui_port:
            out["IRIS_WEBUI_PORT"] = (self.api_host, self.webui_port)
        if self.bridge_port:
            out["BRIDGE_PORT"] = (self.bridge_host or self.api_host, self.bridge_port)
        return out

    @property
    def tls_ports(self) -> frozenset[int]:
        """The ports that speak TLS: those bound off loopback, when a certificate is set."""
        if self.tls_cert is None:
            return frozenset()
        return frozenset(port for host, port in self.listeners().values() if not is_loopback(host))

    @property
    def local_api_url(self) -> str:
        """How this host reaches its own API: plain HTTP on loopback when the API listens there
        (or on every interface: loopback connections are never TLS), else its address, with
        TLS when that port speaks it."""
        host = self.api_host.strip("[]")
        if host in {"", "0.0.0.0"} or is_loopback(host):
            return url_for("http", "127.0.0.1", self.api_port)
        if host == "::":
            return url_for("http", "::1", self.api_port)
        scheme = "https" if self.api_port in self.tls_ports else "http"
        return url_for(scheme, host, self.api_port)

    def _validate_tls(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("IRIS_TLS_CERT and IRIS_TLS_KEY go together: set both or neither")
        problem = cacert_problem(self.tls_cacert)
        if problem:
            raise ConfigError(problem)
        if self.bridge_host.strip("[]") in {"0.0.0.0", "::"}:
            raise ConfigError(
                f"IRIS_BRIDGE_HOST={self.bridge_host} is no address: agents register the URL "
                "their bridge binds to, and Iris must be able to call it. Set this host's own "
                "address (the one its certificate names)"
            )
        if self.tls_cert is not None or self.insecure_http:
            return
        for name, (host, port) in self.listeners().items():
            if not is_loopback(host):
                raise ConfigError(
                    f"{name} {port} would serve plain HTTP on {host}, off loopback: set "
                    "IRIS_TLS_CERT and IRIS_TLS_KEY, or IRIS_INSECURE_HTTP=1 to allow it on a "
                    "network you trust"
                )

    @property
    def vault_addrs(self) -> tuple[str, ...]:
        """Every configured Vault node (``vault_addr`` is their comma-separated list)."""
        return tuple(self.vault_addr.split(","))

    @property
    def token_file(self) -> Path:
        return self.data_dir / TOKEN_FILE_NAME

    @property
    def workspace(self) -> Path:
        """The agent's own folder: CONSTITUTION.md, MEMORY.md, skills/ and tool work."""
        return self.data_dir

    @property
    def control_socket(self) -> Path:
        # gunicorn 27 shares one control socket path by default; each Iris gets its own.
        return self.data_dir / data_layout.RUN_DIR / f"gunicorn-{self.api_port}.ctl"

    def with_token(self, token: str) -> Settings:
        from dataclasses import replace

        return replace(self, api_token=token)

    def masked(self) -> dict[str, object]:
        """The settings as plain values, secrets masked, for ``iris doctor``."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name == "env":
                continue
            value = getattr(self, f.name)
            if f.name in SECRET_FIELDS:
                value = mask(str(value))
            elif isinstance(value, Path):
                value = str(value)
            out[f.name] = value
        return out


def _secrets_settings(env: Mapping[str, str]) -> dict[str, Any]:
    env_file = env.get("IRIS_ENV_FILE", "").strip()
    return {
        "secrets_mode": env.get("IRIS_SECRETS_MODE", "").strip().lower() or "store",
        "secret_backend": env.get("IRIS_SECRET_BACKEND", "").strip().lower() or "file",
        "secret_broker_url": env.get("IRIS_SECRET_BROKER_URL", "").strip().rstrip("/") or None,
        "env_file": Path(env_file).expanduser() if env_file else None,
        "vault_addr": _vault_addrs(
            env.get("IRIS_VAULT_ADDR", "").strip() or env.get("VAULT_ADDR", "").strip(),
            insecure=env_flag(env, INSECURE_VARIABLE),
        )
        or "http://127.0.0.1:8200",
        "vault_mount": env.get("IRIS_VAULT_MOUNT", "").strip().strip("/") or "secret",
        "vault_prefix": env.get("IRIS_VAULT_PREFIX", "").strip().strip("/") or "iris",
        "vault_proxy_path": env.get("IRIS_VAULT_PROXY_PATH", "").strip().strip("/"),
        "vault_token": credential(env, "IRIS_VAULT_TOKEN"),
        "vault_role_id": env.get("IRIS_VAULT_ROLE_ID", "").strip(),
        "vault_secret_id": credential(env, "IRIS_VAULT_SECRET_ID"),
        "vault_cacert": env.get("IRIS_VAULT_CACERT", "").strip() or None,
        "vault_timeout_seconds": env_float(env, "IRIS_VAULT_TIMEOUT_SECONDS", 5.0),
    }


def _tls_settings(env: Mapping[str, str]) -> dict[str, Any]:
    cert = env.get("IRIS_TLS_CERT", "").strip()
    key = env.get("IRIS_TLS_KEY", "").strip()
    # Under systemd the key file stays root's: the unit loads it as the credential
    # "iris-tls-key" (LoadCredential=), readable by the service user only, and that copy wins.
    credentials = env.get("CREDENTIALS_DIRECTORY", "").strip()
    if key and credentials and (Path(credentials) / TLS_KEY_CREDENTIAL).is_file():
        key = str(Path(credentials) / TLS_KEY_CREDENTIAL)
    return {
        "bridge_host": env.get("IRIS_BRIDGE_HOST", "").strip(),
        "tls_cert": Path(cert).expanduser() if cert else None,
        "tls_key": Path(key).expanduser() if key else None,
        "tls_cacert": env.get("IRIS_TLS_CACERT", "").strip() or None,
        "insecure_http": env_flag(env, INSECURE_VARIABLE),
    }


def _vault_addrs(raw: str, *, insecure: bool = False) -> str:
    """``IRIS_VAULT_ADDR`` normalised: one URL, or every node of an HA cluster separated by
    commas (Iris moves to the next when one stops answering). Plain HTTP to another host would
    carry the AppRole secret id, tokens and secret values in clear: refused unless
    ``IRIS_INSECURE_HTTP=1``."""
    addrs = [part.strip().rstrip("/") for part in raw.split(",")] if raw else []
    for addr in addrs:
        parsed = urlsplit(addr)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise ConfigError(
                "IRIS_VAULT_ADDR must be an http(s) URL or a comma-separated list of them, "
                f"not {addr!r}"
            )
        refusal = plain_http_refusal(addr, "IRIS_VAULT_ADDR", insecure=insecure)
        if refusal:
            raise ConfigError(refusal)
    if len(set(addrs)) != len(addrs):
        raise ConfigError("IRIS_VAULT_ADDR lists the same address twice")
    return ",".join(addrs)


def mask(secret: str) -> str:
    """Enough to tell two secrets apart, never enough to use one."""
    if not secret:
        return "(unset)"
    return f"****{secret[-4:]}" if len(secret) >= 16 else "****"


def known_api_token(settings: Settings) -> str:
    """The API token a server with these settings uses (the environment's, else the token
    file's), or '' when there is none yet: a command that only presents it must not invent one."""
    if settings.api_token:
        return settings.api_token
    try:
        return settings.token_file.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def ensure_api_token(settings: Settings) -> Settings:
    """Settings with an API token: from the environment, else the data dir's token file
    (created with mode 0600 on first use)."""
    if settings.api_token:
        return settings
    path = settings.token_file
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return settings.with_token(token)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return settings.with_token(token)

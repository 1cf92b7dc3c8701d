"""The Web UI's settings, read from the environment snapshot Iris passes to plugins.

``IRIS_WEBUI_PORT`` (a core setting, ``settings.webui_port``) turns the Web UI on. The others:
``IRIS_WEBUI_PASSWORD`` (or ``IRIS_WEBUI_PASSWORD_FILE``) enables the password form beside the
one-time link; ``IRIS_WEBUI_MAX_UPLOAD_BYTES`` caps one uploaded file (default 10 MiB);
``IRIS_WEBUI_ALLOWED_HOSTS`` (comma-separated ``host[:port]``) names more Host headers the Web
UI answers to than its loopback names and ``IRIS_API_HOST`` (DNS rebinding: see ``routes``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from iris_runtime.config import Settings
from iris_runtime.env_values import credential, env_number
from iris_runtime.tools.environment import is_withheld

PASSWORD_VARIABLE = "IRIS_WEBUI_PASSWORD"  # noqa: S105 (a variable name)
UPLOAD_VARIABLE = "IRIS_WEBUI_MAX_UPLOAD_BYTES"
DEFAULT_MAX_UPLOAD = 10 * 1024 * 1024
HOSTS_VARIABLE = "IRIS_WEBUI_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
MIN_SECRET_CHARS = 6  # shorter values would blank out ordinary words in tool cards


def _upload_limit(env: Mapping[str, str]) -> int:
    return env_number(env, UPLOAD_VARIABLE, DEFAULT_MAX_UPLOAD, minimum=1, kind=int)


def _with_port(host: str, port: int) -> str:
    host = host.strip().lower()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # a bare IPv6 address
    return f"{host}:{port}"


def _allowed_hosts(settings: Settings, port: int) -> frozenset[str]:
    """The Host headers (``name:port``, lower case) the Web UI answers to."""
    names = set(LOOPBACK_NAMES)
    if settings.api_host and settings.api_host not in {"0.0.0.0", "::"}:
        names.add(settings.api_host)
    allowed = {_with_port(n, port) for n in names}
    for item in settings.env.get(HOSTS_VARIABLE, "").split(","):
        item = item.strip().lower()
        if not item:
            continue
        # "host:port" as given; a bare name (or [v6] address) means the Web UI's own port.
        has_port = item.rsplit(":", 1)[-1].isdigit() and (
            (item.startswith("[") and "]:" in item) or item.count(":") == 1
        )
        allowed.add(item if has_port else _with_port(item, port))
    return frozenset(allowed)


def _secrets(settings: Settings, password: str | None) -> tuple[str, ...]:
    """Values never to show in a tool card: the internal API token, the Web UI password and
    the process's credential-like variables (those tools do not get; see
    ``tools/environment.py``), longest first so a longer one is never half-replaced."""
    found = {settings.api_token, password or ""}
    for env in (settings.env, os.environ):
        found.update(value for name, value in env.items() if is_withheld(name))
    return tuple(sorted((v for v in found if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True))


@dataclass(frozen=True)
class WebConfig:
    port: int
    data_dir: Path
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    password: str | None = field(default=None, repr=False)
    allowed_hosts: frozenset[str] = frozenset()
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> WebConfig | None:
        if not settings.webui_port:
            return None
        # None when neither variable is set: then only login links sign in.
        password = credential(settings.env, PASSWORD_VARIABLE, strip=False) or None
        return cls(
            port=settings.webui_port,
            data_dir=settings.data_dir,
            max_upload_bytes=_upload_limit(settings.env),
            password=password,
            allowed_hosts=_allowed_hosts(settings, settings.webui_port),
            secrets=_secrets(settings, password),
        )

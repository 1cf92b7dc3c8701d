"""The Web UI's settings, read from the environment snapshot Iris passes to plugins.

``IRIS_WEBUI_PORT`` (a core setting, ``settings.webui_port``) turns the Web UI on. The others:
``IRIS_WEBUI_PASSWORD`` (or ``IRIS_WEBUI_PASSWORD_FILE``) enables the password form beside the
one-time link; ``IRIS_WEBUI_MAX_UPLOAD_BYTES`` caps one uploaded file (default 10 MiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError

PASSWORD_VARIABLE = "IRIS_WEBUI_PASSWORD"  # noqa: S105 (a variable name)
UPLOAD_VARIABLE = "IRIS_WEBUI_MAX_UPLOAD_BYTES"
DEFAULT_MAX_UPLOAD = 10 * 1024 * 1024


def _password(env: Mapping[str, str]) -> str | None:
    """From ``IRIS_WEBUI_PASSWORD_FILE`` (keeps it out of every child's environment) or
    ``IRIS_WEBUI_PASSWORD``; None when neither is set (then only login links work)."""
    file_name = env.get(f"{PASSWORD_VARIABLE}_FILE", "").strip()
    if file_name:
        try:
            value = Path(file_name).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"{PASSWORD_VARIABLE}_FILE: cannot read {file_name}: {exc.strerror}"
            ) from None
    else:
        value = env.get(PASSWORD_VARIABLE, "")
    return value or None


def _upload_limit(env: Mapping[str, str]) -> int:
    raw = env.get(UPLOAD_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MAX_UPLOAD
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{UPLOAD_VARIABLE} must be a number of bytes, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{UPLOAD_VARIABLE} must be at least 1, got {value}")
    return value


@dataclass(frozen=True)
class WebConfig:
    port: int
    data_dir: Path
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> WebConfig | None:
        if not settings.webui_port:
            return None
        return cls(
            port=settings.webui_port,
            data_dir=settings.data_dir,
            max_upload_bytes=_upload_limit(settings.env),
            password=_password(settings.env),
        )

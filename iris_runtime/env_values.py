"""Reading one setting from an environment mapping: a number within bounds, a port, a flag, a
list, a credential from ``NAME_FILE`` or ``NAME``. Every failure is a :class:`ConfigError` that
names the variable (and never shows a credential's value).

:mod:`iris_runtime.config` builds Iris's settings with these; plugins and features whose
settings live with them (the transports, custom agents, sub-agent spawning) use them too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from iris_runtime.errors import ConfigError

Number = TypeVar("Number", int, float)


def env_number(
    env: Mapping[str, str],
    name: str,
    default: Number,
    *,
    minimum: float,
    maximum: float | None = None,
    kind: type[Number],
) -> Number:
    """``name``'s value as ``kind`` (int or float) within ``[minimum, maximum]``; ``default``
    when unset or blank. Anything else (text, NaN, infinity) is a ConfigError naming ``name``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{name} must be {what}, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {raw[:40]!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum:g}, got {value:g}")
    return value


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    return env_number(env, name, default, minimum=minimum, kind=int)


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds, hours, ...: zero is refused as well."""
    value = env_number(env, name, default, minimum=0.0, kind=float)
    if value <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value:g}")
    return value


def env_ms(env: Mapping[str, str], name: str, default_ms: int) -> float:
    """A duration given in milliseconds, returned in seconds."""
    return env_int(env, name, default_ms, minimum=1) / 1000.0


def env_port(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    port = env_int(env, name, 0, minimum=1)
    if port > 65535:
        raise ConfigError(f"{name} must be a TCP port (1-65535), got {port}")
    return port


def env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def env_list(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list; ``None`` when the variable is unset (meaning "no restriction")."""
    if name not in env:
        return None
    return tuple(item.strip() for item in env[name].split(",") if item.strip())


def credential(env: Mapping[str, str], name: str, *, strip: bool = True) -> str:
    """A credential from the file named by ``NAME_FILE`` (preferred: a file keeps it out of
    the process environment of everything Iris starts) or from ``NAME``; '' when neither is
    set. A file's value is stripped (editors add a newline); ``NAME``'s unless ``strip`` is
    False (a password may begin or end with a space)."""
    file_name = env.get(f"{name}_FILE", "").strip()
    if file_name:
        try:
            return Path(file_name).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE: cannot read {file_name}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{name}_FILE: {file_name} is not UTF-8 text (byte {exc.start})"
            ) from None
    value = env.get(name, "")
    return value.strip() if strip else value

"""The ``env`` mode: values from the environment and the host env file, read-only.

This is the behaviour from before the broker had a store, kept for installs that still keep
their keys in ``/iris/.env``. The env file is re-read when it changes, so an edited key is
served without a restart. The process environment wins over the file, as it would for a shell.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from iris_runtime.config import Settings
from iris_runtime.secrets.backend import ReadOnlyStore


class EnvFileLine(NamedTuple):
    number: int  # from 1
    key: str  # as written before the first "=" (the whole line when it has none)
    has_value: bool  # the line has a "="
    value: str  # as written after it


def env_file_lines(text: str) -> Iterator[EnvFileLine]:
    """Each line that is not blank or a ``#`` comment, an ``export`` prefix taken off."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        yield EnvFileLine(number, key, bool(sep), value)


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines; ``export``, blank lines, ``#`` comments and matching quotes handled
    (a line that is not ``KEY=value`` is skipped)."""
    out: dict[str, str] = {}
    for _, key, has_value, value in env_file_lines(text):
        key = key.strip()
        if not has_value or not key:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


class EnvSecretStore:
    name = "env"

    def __init__(self, env: Mapping[str, str], env_file: Path | None) -> None:
        self._env = env
        self._env_file = env_file
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int], dict[str, str]] | None = None

    def get(self, name: str) -> str | None:
        value = self._env.get(name)
        if value:
            return value
        return self._file_values().get(name) or None

    def names(self) -> list[str]:
        # Only the file's names: the process environment holds far more than secrets.
        return sorted(self._file_values())

    def put(self, name: str, value: str) -> None:
        raise ReadOnlyStore("env mode: secrets come from the environment and the env file")

    def delete(self, name: str) -> bool:
        raise ReadOnlyStore("env mode: secrets come from the environment and the env file")

    def describe(self) -> str:
        where = str(self._env_file) if self._env_file else "no IRIS_ENV_FILE"
        return f"env (process environment, {where})"

    def check(self) -> None:
        self._file_values()

    def _file_values(self) -> dict[str, str]:
        if self._env_file is None:
            return {}
        try:
            st = self._env_file.stat()
        except FileNotFoundError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if self._cache is None or self._cache[0] != stamp:
                text = self._env_file.read_text(encoding="utf-8", errors="replace")
                self._cache = (stamp, parse_env_file(text))
            return self._cache[1]


def env_store(settings: Settings) -> EnvSecretStore:
    return EnvSecretStore(settings.env, settings.env_file)

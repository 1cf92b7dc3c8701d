"""Registers the built-in secret backends: ``file`` (default), ``vault`` and ``env``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.secrets.backend import SecretBackend
from iris_runtime.secrets.env_store import env_store
from iris_runtime.secrets.file_store import file_store


def vault_store(settings: Settings) -> SecretBackend:
    # Imported on use: hvac and requests are not worth loading for hosts that never use Vault.
    from iris_runtime.secrets.vault import VaultBackend

    if settings.secrets_mode == "proxy":
        path = settings.vault_proxy_path or settings.vault_prefix
        return VaultBackend(settings, path=path, read_only=True)
    return VaultBackend(settings)


@hookimpl
def register_secret_backends(register: Callable[[str, Any], None]) -> None:
    register("file", file_store)
    register("vault", vault_store)
    register("env", env_store)

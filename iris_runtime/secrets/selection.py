"""Which backend the broker uses, from ``IRIS_SECRETS_MODE`` and ``IRIS_SECRET_BACKEND``.

- ``store`` (default): the backend named by ``IRIS_SECRET_BACKEND`` (``file`` or ``vault``, or
  one a plugin registered) holds the values; ``iris secrets set`` writes there.
- ``proxy``: Iris holds no values; every allowed read goes live to Vault at
  ``IRIS_VAULT_PROXY_PATH``. Writes are refused: manage the secrets in Vault itself.
- ``env``: the pre-store behaviour; values come from the environment and ``IRIS_ENV_FILE``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from iris_runtime.agents.registry import registry_for
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.secrets.audit import audit_log_for
from iris_runtime.secrets.backend import SecretBackend
from iris_runtime.secrets.broker import SecretBroker


def backend_name(settings: Settings) -> str:
    if settings.secrets_mode == "env":
        return "env"
    if settings.secrets_mode == "proxy":
        return "vault"
    return settings.secret_backend


def check_backend(settings: Settings, backends: Mapping[str, Any]) -> None:
    name = backend_name(settings)
    if name not in backends:
        known = ", ".join(sorted(backends)) or "none"
        raise ConfigError(
            f"IRIS_SECRET_BACKEND={name!r} (IRIS_SECRETS_MODE={settings.secrets_mode}) "
            f"is not installed (known: {known})"
        )


def broker_for(
    settings: Settings, backends: Mapping[str, Callable[[Settings], Any]]
) -> SecretBroker:
    """The broker for ``settings``. Builds no connection: a Vault that is down at start-up
    answers 503 per request instead of keeping Iris from starting."""
    check_backend(settings, backends)
    backend: SecretBackend = backends[backend_name(settings)](settings)
    return SecretBroker(
        backend, registry_for(settings), audit_log_for(settings.data_dir), settings.secrets_mode
    )

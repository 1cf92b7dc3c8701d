"""Secrets kept in Vault/OpenBao (KV v2), reached through hvac.

Each secret is ``{"value": "..."}`` at ``<mount>/data/<prefix>/<name>``. The connection
(login, renewal) lives in :mod:`iris_runtime.secrets.vault_connection`, its errors in
:mod:`iris_runtime.secrets.vault_errors`.
In ``proxy`` mode the backend is read-only and reads under ``IRIS_VAULT_PROXY_PATH``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import hvac
import hvac.exceptions as hvac_errors

from iris_runtime.secrets.backend import (
    SECRET_NAME_RE,
    ReadOnlyStore,
    SecretStoreUnavailable,
    validate_secret_name,
    validate_secret_value,
)
from iris_runtime.secrets.vault_connection import VaultConnection, as_dict
from iris_runtime.secrets.vault_errors import quote_vault_error

if TYPE_CHECKING:
    from iris_runtime.config import Settings


log = logging.getLogger(__name__)


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


class VaultBackend:
    """Secrets as KV v2 entries ``<mount>/<path>/<NAME>`` holding ``{"value": "<str>"}``.

    ``read_only`` is the proxy flavour: Vault is managed by its operators and Iris only reads.
    """

    name = "vault"

    def __init__(
        self,
        settings: Settings,
        *,
        path: str | None = None,
        read_only: bool = False,
        client: hvac.Client | None = None,
    ) -> None:
        self.mount = settings.vault_mount
        self.path = (settings.vault_prefix if path is None else path).strip("/")
        self.read_only = read_only
        self.connection = VaultConnection(settings, client=client)

    def __repr__(self) -> str:
        return f"VaultBackend({self.describe()!r})"

    def _location(self, name: str) -> str:
        return _join(self.path, validate_secret_name(name))

    def get(self, name: str) -> str | None:
        location = self._location(name)
        reply = self._read(location, name)
        if reply is None:
            return None
        data = (reply.get("data") or {}).get("data") or {}
        return _value_of(data, self._describe_location(location))

    def _read(self, location: str, name: str) -> dict[str, Any] | None:
        reply = self.connection.call(
            _absent_on_404(
                lambda c: c.secrets.kv.v2.read_secret_version(
                    location, mount_point=self.mount, raise_on_deleted_version=True
                )
            ),
            what=f"the read of secret {name!r}",
            idempotent=True,
        )
        # Absent, or its latest version deleted or destroyed.
        return None if self._absent(reply) else as_dict(reply)

    def put(self, name: str, value: str) -> None:
        self._refuse_writes()
        location = self._location(name)
        value = validate_secret_value(value)
        reply = self.connection.call(
            _absent_on_404(
                lambda c: c.secrets.kv.v2.create_or_update_secret(
                    location, secret={"value": value}, mount_point=self.mount
                )
            ),
            what=f"the write of secret {name!r}",
            scrub=(value,),
        )
        if self._absent(reply):  # raises first when the mount is missing
            raise SecretStoreUnavailable(
                f"Vault at {self.connection.addr} failed the write of secret {name!r} (HTTP 404)"
            )

    def delete(self, name: str) -> bool:
        """Remove every version and the metadata. True when a readable value was removed."""
        self._refuse_writes()
        location = self._location(name)
        metadata = self._metadata(location, name)
        if metadata is None:
            return False
        self.connection.call(
            lambda c: c.secrets.kv.v2.delete_metadata_and_all_versions(
                location, mount_point=self.mount
            ),
            what=f"the delete of secret {name!r}",
        )
        return _latest_is_live(metadata)

    def _metadata(self, location: str, name: str) -> dict[str, Any] | None:
        reply = self.connection.call(
            _absent_on_404(
                lambda c: c.secrets.kv.v2.read_secret_metadata(location, mount_point=self.mount)
            ),
            what=f"the metadata read of secret {name!r}",
            idempotent=True,
        )
        return None if self._absent(reply) else as_dict(reply).get("data") or {}

    def names(self) -> list[str]:
        """Names under the path, sorted; sub-folders and names Iris cannot serve are left out.
        (A name whose latest version was soft-deleted outside Iris is still listed.)"""

        reply = self.connection.call(
            _absent_on_404(
                lambda c: c.secrets.kv.v2.list_secrets(self.path, mount_point=self.mount)
            ),
            what=f"the listing of {self.mount}/{self.path}",
            idempotent=True,
        )
        if self._absent(reply):
            return []
        keys = (as_dict(reply).get("data") or {}).get("keys") or []
        return sorted(k for k in keys if isinstance(k, str) and SECRET_NAME_RE.fullmatch(k))

    def describe(self) -> str:
        flavour = ", read-only" if self.read_only else ""
        return (
            f"vault {self.connection.addr} kv-v2 mount {self.mount!r} path {self.path!r} "
            f"({self.connection.auth_method} auth{flavour})"
        )

    def check(self) -> None:
        """Raise :class:`SecretStoreUnavailable` unless Vault is reachable, unsealed, accepts
        our token and has a KV v2 engine at the mount."""
        self.connection.check_token()
        try:
            self.names()
        except SecretStoreUnavailable as exc:
            # A read-only policy may grant read on each name but no list: that is fine.
            if "permission denied" not in exc.message:
                raise

    def close(self) -> None:
        self.connection.close()

    def _refuse_writes(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(
                "proxy mode: manage secrets in Vault itself "
                f"(Iris only reads {self.mount}/{self.path or '(root)'})"
            )

    def _absent(self, reply: object) -> bool:
        if not isinstance(reply, _NotFound):
            return False
        if reply.no_mount:
            raise SecretStoreUnavailable(
                f"Vault at {self.connection.addr} has no KV v2 secrets engine mounted at "
                f"{self.mount!r}"
            )
        return True

    def _describe_location(self, location: str) -> str:
        return f"{self.mount}/{location}"


class _NotFound:
    """A 404, returned rather than raised so our own error carries no hvac context."""

    def __init__(self, no_mount: bool) -> None:
        self.no_mount = no_mount


def _absent_on_404(op: Callable[[hvac.Client], object]) -> Callable[[hvac.Client], object]:
    def run(client: hvac.Client) -> object:
        try:
            return op(client)
        except hvac_errors.InvalidPath as exc:
            # A missing key answers 404 with no errors; a missing mount says "no handler".
            return _NotFound("no handler for route" in quote_vault_error(exc, ()))

    return run


def _value_of(data: dict[str, Any], where: str) -> str:
    value = data.get("value")
    if isinstance(value, str):
        return value
    strings = [k for k, v in data.items() if isinstance(v, str)]
    if "value" not in data and len(strings) == 1:
        # Written by hand with another key name (proxy mode): one string field is unambiguous.
        return str(data[strings[0]])
    fields = ", ".join(sorted(map(repr, data))) or "none"
    raise SecretStoreUnavailable(
        f"Vault secret {where} has no string 'value' field (fields: {fields})"
    )


def _latest_is_live(metadata: dict[str, Any]) -> bool:
    version = str(metadata.get("current_version", ""))
    info = (metadata.get("versions") or {}).get(version) or {}
    return bool(info) and not info.get("deletion_time") and not info.get("destroyed")


def vault_backend(settings: Settings) -> VaultBackend:
    """The ``vault`` backend: read-write under the prefix, or read-only in proxy mode."""
    if settings.secrets_mode == "proxy":
        return VaultBackend(
            settings, path=settings.vault_proxy_path or settings.vault_prefix, read_only=True
        )
    return VaultBackend(settings)

"""The contract every secret backend meets, and the errors it raises.

A backend maps secret names to string values. It never logs a value and never puts one in an
exception message. Read-only backends (``env``, Vault in proxy mode) raise :class:`ReadOnlyStore`
from the write methods.
"""

from __future__ import annotations

import re
from typing import Protocol

from iris_runtime.errors import InvalidInput, IrisError

# The same rule the agents.json allow-list uses, so every listable name is readable.
SECRET_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
MAX_SECRET_BYTES = 64 * 1024


class SecretStoreUnavailable(IrisError):
    """The store cannot answer right now (Vault down or sealed, login refused)."""

    code = "secret_store_unavailable"
    status = 503


class ReadOnlyStore(IrisError):
    """The configured mode or backend does not hold values Iris may change."""

    code = "secret_store_read_only"
    status = 409


class SecretBackend(Protocol):
    """A place secret values live.

    ``describe()`` is one line for ``iris doctor`` (no values, no tokens). ``check()`` raises
    :class:`SecretStoreUnavailable` when the store cannot be reached.
    """

    name: str

    def get(self, name: str) -> str | None: ...

    def put(self, name: str, value: str) -> None: ...

    def delete(self, name: str) -> bool: ...

    def names(self) -> list[str]: ...

    def describe(self) -> str: ...

    def check(self) -> None: ...


def validate_secret_name(name: str) -> str:
    """``name`` if it is a safe secret name, else :class:`InvalidInput` (HTTP 400)."""
    if not SECRET_NAME_RE.fullmatch(name):
        raise InvalidInput(
            "invalid secret name: use 1-128 of letters, digits, '_', '.', '-', "
            "starting with a letter or '_'",
            code="invalid_secret_name",
        )
    return name


def validate_secret_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput("a secret value must be a string", code="invalid_secret_value")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SECRET_BYTES:
        raise InvalidInput(
            f"a secret value may be at most {MAX_SECRET_BYTES} bytes", code="secret_too_large"
        )
    if "\x00" in value:
        raise InvalidInput("a secret value must not contain NUL", code="invalid_secret_value")
    return value

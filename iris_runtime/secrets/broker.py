"""The broker's decisions: who may read which secret, and what each request leaves in the audit.

The caller is whatever the web layer's token check derived (``iris`` for the shared token, an
agent's name for its own token); nothing the caller says about itself reaches this module. Iris
is unrestricted; an agent may read exactly the names on its ``agents.json`` allow-list, read
fresh on every request so a registration change applies at once. Only Iris may list, write or
delete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.errors import InvalidInput, IrisError, NotFound
from iris_runtime.secrets import audit
from iris_runtime.secrets.audit import AuditLog
from iris_runtime.secrets.backend import (
    SecretBackend,
    SecretStoreUnavailable,
    validate_secret_name,
    validate_secret_value,
)
from iris_runtime.secrets.run_tokens import RUN_CALLER_PREFIX, RUN_TOKENS

IRIS_CALLER = "iris"

T = TypeVar("T")


class SecretDenied(IrisError):
    code = "secret_denied"
    status = 403


class SecretMissing(NotFound):
    code = "secret_not_found"


class SecretBroker:
    def __init__(
        self, backend: SecretBackend, registry: AgentRegistry, audit_log: AuditLog, mode: str
    ) -> None:
        self.backend = backend
        self.registry = registry
        self.audit = audit_log
        self.mode = mode

    def read(self, caller: str, name: str, request_id: str) -> str:
        """The value of ``name`` for ``caller``; raises 400/403/404/503 errors, each audited."""

        def attempt() -> str:
            validate_secret_name(name)
            if not self.may_read(caller, name):
                raise SecretDenied(
                    f"{caller!r} may not read secret {name!r}: it is not on its allow-list"
                )
            value = self.backend.get(name)
            if value is None:
                raise SecretMissing(f"secret {name!r} does not exist")
            return value

        return self._audited(caller, "read", name, request_id, attempt)

    def may_read(self, caller: str, name: str) -> bool:
        if caller == IRIS_CALLER:
            return True
        if caller.startswith(RUN_CALLER_PREFIX):  # a sandboxed run: its grant, nothing more
            return RUN_TOKENS.may_read(caller, name)
        entry = self.registry.get(caller)
        return entry is not None and name in entry.secrets

    def put(self, caller: str, name: str, value: object, request_id: str) -> None:
        def attempt() -> None:
            self._require_iris(caller, name)
            self.backend.put(validate_secret_name(name), validate_secret_value(value))

        self._audited(caller, "write", name, request_id, attempt)

    def delete(self, caller: str, name: str, request_id: str) -> None:
        def attempt() -> None:
            self._require_iris(caller, name)
            if not self.backend.delete(validate_secret_name(name)):
                raise SecretMissing(f"secret {name!r} does not exist")

        self._audited(caller, "delete", name, request_id, attempt)

    def names(self, caller: str, request_id: str) -> list[str]:
        def attempt() -> list[str]:
            self._require_iris(caller, "*")
            return self.backend.names()

        return self._audited(caller, "list", "*", request_id, attempt)

    @staticmethod
    def _require_iris(caller: str, name: str) -> None:
        if caller != IRIS_CALLER:
            raise SecretDenied(f"only Iris may manage secrets; {caller!r} may only read {name!r}")

    def _audited(
        self, caller: str, action: str, name: str, request_id: str, attempt: Callable[[], T]
    ) -> T:
        shown = printable_name(name)
        try:
            result = attempt()
        except IrisError as exc:
            self.audit.record(caller, action, shown, _decision_for(exc), request_id)
            raise
        self.audit.record(caller, action, shown, audit.ALLOWED, request_id)
        return result


def printable_name(name: str) -> str:
    """``name`` as the audit log may show it: an invalid name is kept only if printable and
    short, so a hostile name can neither forge audit lines nor flood the file."""
    return name if name.isprintable() and len(name) <= 256 else "(unprintable)"


def _decision_for(exc: IrisError) -> str:
    if isinstance(exc, SecretDenied):
        return audit.DENIED
    if isinstance(exc, NotFound):
        return audit.MISSING
    if isinstance(exc, SecretStoreUnavailable):
        return audit.UNAVAILABLE
    if isinstance(exc, InvalidInput):
        return audit.INVALID
    return exc.code

"""API keys, resolved per request.

A provider never holds its key: it asks a :class:`KeyResolver` before each call, so a rotated key
is picked up by the next request and the secret broker can later plug in here (a resolver that
asks the broker instead of the environment) without touching the providers.

A missing key is not a start-up error, because a key may arrive after the runtime started. It
shows up as a :class:`ProviderError` event on the first call that needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from iris_runtime.config import Settings
from iris_runtime.engine.provider import ProviderError
from iris_runtime.secrets.client import BrokerClient, BrokerRefused, BrokerUnreachable


class KeyResolver(Protocol):
    """Returns the current API key, or ``None`` when there is none."""

    @property
    def source(self) -> str:
        """Where the key comes from, as the user would set it (e.g. ``ANTHROPIC_API_KEY``)."""
        ...

    def __call__(self) -> str | None: ...


@dataclass(frozen=True)
class EnvKey:
    """A key read from ``settings.env``.

    ``settings.env`` is the environment snapshot taken at start-up, so this reads the snapshot
    at call time: a key set later in the process environment is not seen yet. The secret broker
    replaces this resolver when it exists; the call-time read is what makes that a drop-in.
    """

    var: str
    env: Mapping[str, str]

    @property
    def source(self) -> str:
        return self.var

    def __call__(self) -> str | None:
        return self.env.get(self.var, "").strip() or None


@dataclass(frozen=True)
class OptionalKey:
    """A key the server may not need (a local OpenAI-compatible server): ``placeholder`` stands in
    when none is set, because the SDK insists on some key."""

    inner: KeyResolver
    placeholder: str

    @property
    def source(self) -> str:
        return self.inner.source

    def __call__(self) -> str | None:
        return self.inner() or self.placeholder


class KeyUnavailable(Exception):
    """A resolver could not get the key and knows why (broker refused or unreachable)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class BrokerKey:
    """A key fetched from the parent's secret broker under the same name as its variable
    (``ANTHROPIC_API_KEY``): a sub-agent in ``store``/``proxy`` mode has no keys of its own."""

    var: str
    client: BrokerClient

    @property
    def source(self) -> str:
        return f"{self.var} from the secret broker at {self.client.url}"

    def __call__(self) -> str | None:
        try:
            return self.client.get(self.var)
        except BrokerRefused as exc:
            raise KeyUnavailable(exc.message, retryable=False) from None
        except BrokerUnreachable as exc:
            raise KeyUnavailable(exc.message, retryable=True) from None


_broker_clients: dict[tuple[str, str], BrokerClient] = {}


def env_key(settings: Settings, var: str) -> KeyResolver:
    """The key named ``var``: from the broker when this runtime has one (a sub-agent in
    ``store``/``proxy`` mode), else from the environment."""
    if settings.secret_broker_url and settings.secrets_mode != "env":
        ident = (settings.secret_broker_url, settings.api_token)
        client = _broker_clients.setdefault(ident, broker_client(settings))
        return BrokerKey(var, client)
    return EnvKey(var, settings.env)


def broker_client(settings: Settings) -> BrokerClient:
    """The broker of this runtime's settings, with their TLS trust and plain-HTTP switch."""
    return BrokerClient(
        settings.secret_broker_url or "",
        settings.api_token,
        cacert=settings.tls_cacert,
        insecure=settings.insecure_http,
    )


def missing_key(provider: str, resolver: KeyResolver) -> ProviderError:
    return ProviderError(f"{provider}: {resolver.source} is not set", retryable=False)


ClientT = TypeVar("ClientT")


class ClientCache(Generic[ClientT]):
    """One SDK client (and so one connection pool) per key: a rotated key gets a fresh client,
    the old one is dropped once the calls still using it are done."""

    def __init__(self, build: Callable[[str], ClientT]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._current: tuple[str, ClientT] | None = None

    def get(self, key: str) -> ClientT:
        with self._lock:
            if self._current is None or self._current[0] != key:
                self._current = (key, self._build(key))
            return self._current[1]

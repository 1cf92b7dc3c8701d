"""The common shape of a provider over an official SDK (Anthropic's, OpenAI's).

Both SDKs are generated from one template: their clients take the same options and their errors
carry the same fields, so the key check, the model lookup, the client per key, the attempts with
their retries and the meaning of an HTTP error are implemented once, in :class:`RetryingProvider`.
A provider builds its request, reads its stream and names its SDK's exception classes.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

import httpx2

from iris_runtime.config import Settings
from iris_runtime.engine.provider import Done, ProviderError, ProviderEvent, ProviderRequest, Usage
from iris_runtime.errors import ConfigError
from iris_runtime.providers import interrupt
from iris_runtime.providers.keys import ClientCache, KeyResolver, KeyUnavailable, missing_key
from iris_runtime.providers.models import ModelInfo, resolve_model
from iris_runtime.providers.retry import (
    CONNECT_TIMEOUT,
    Failure,
    Item,
    RetryPolicy,
    guarded,
    relay,
    run_with_retries,
    status_failure,
    stream_error_failure,
)

log = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
CallT = TypeVar("CallT")


class StatusError(Protocol):
    """What both SDKs' ``APIStatusError`` carry."""

    @property
    def status_code(self) -> int: ...

    @property
    def response(self) -> httpx2.Response: ...

    @property
    def type(self) -> str | None: ...


def finished(stop_reason: str, usage: Usage, model: ModelInfo) -> Done:
    """The final event of an answer: why the model stopped, and the usage with its cost."""
    return Done(stop_reason, replace(usage, cost_usd=model.price.cost(usage)))


class RetryingProvider(ABC, Generic[ClientT, CallT]):
    """A provider over an official SDK: key check, model lookup, one client per key, and attempts
    run through :func:`.retry.guarded` and :func:`.retry.run_with_retries`. Subclasses name the
    SDK's client class, build the call, and run one attempt, yielding events and at most one
    :class:`.retry.Failure`."""

    name = ""
    client_class: Callable[..., ClientT]
    """The SDK's client (``anthropic.Anthropic``, ``openai.OpenAI``)."""

    def __init__(
        self,
        settings: Settings,
        model: ModelInfo,
        key: KeyResolver,
        base_url: str,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.model = model
        self.context_window = model.context_window  # the engine compacts history to fit
        self.key = key
        self.base_url = base_url
        self.timeout = settings.provider_stream_timeout_seconds
        self.retry_policy = retry_policy or RetryPolicy(settings.provider_max_retries)
        self._models = {model.id: model}
        self._clients = ClientCache(self._tracked_client)

    def stream(self, request: ProviderRequest, abort: threading.Event) -> Iterator[ProviderEvent]:
        try:
            key = self.key()
        except KeyUnavailable as exc:
            yield ProviderError(f"{self.name}: {exc.message}", retryable=exc.retryable)
            return
        if key is None:
            yield missing_key(self.name, self.key)
            return
        try:
            call = self.prepare(request, self.model_for(request))
        except ConfigError as exc:
            yield ProviderError(f"{self.name}: {exc.message}")
            return
        client, tracked = self._clients.get(key)
        run = guarded if tracked else relay

        def attempt() -> Iterator[Item]:
            return run(lambda: self.attempt(client, call), abort, self.timeout)

        yield from run_with_retries(self.name, attempt, self.retry_policy, abort)

    def model_for(self, request: ProviderRequest) -> ModelInfo:
        """The resolved model, or the one a request names (resolved once, by the same rules)."""
        name = request.model or self.model.id
        if name not in self._models:
            settings = replace(self.settings, model=name)
            self._models[name] = resolve_model(settings, self.name, self.base_url)
        return self._models[name]

    def _tracked_client(self, key: str) -> tuple[ClientT, bool]:
        """A new client, and whether its I/O could be made interruptible (see :func:`guarded`)."""
        client = self.new_client(key)
        tracked = interrupt.track(client)
        if not tracked:
            log.warning("%s: cannot track the SDK's connections; stops use a thread", self.name)
        return client, tracked

    def new_client(self, key: str) -> ClientT:
        """An SDK client for ``key``, with the SDK's own retries off: all retrying is ours,
        visible and abortable."""
        return self.client_class(
            api_key=key,
            base_url=self.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(self.timeout, connect=CONNECT_TIMEOUT),
        )

    def http_failure(self, exc: StatusError, detail: str) -> Failure:
        """What an SDK's ``APIStatusError`` means; ``detail`` is the server's own message. A
        status below 400 is an error event inside a started stream (the Anthropic SDK raises
        those as status errors of the 200 response)."""
        if exc.status_code < 400:
            return stream_error_failure(exc.type, detail)
        return status_failure(
            exc.status_code,
            detail,
            exc.response.headers,
            key_source=self.key.source,
            error_type=exc.type,
        )

    @abstractmethod
    def prepare(self, request: ProviderRequest, model: ModelInfo) -> CallT:
        """The wire request for ``request``, built once and reused by every attempt."""

    @abstractmethod
    def attempt(self, client: ClientT, call: CallT) -> Generator[Item, None, None]:
        """One try: the events of the response, or a Failure that decides about retrying."""

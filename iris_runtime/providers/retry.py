"""The call machinery shared by the network providers: retries, the stream relay and failures
(:class:`.sdk_provider.RetryingProvider` puts them together).

Both SDK clients are created with ``max_retries=0``: every retry happens here, so each wait is
visible to the user as a :class:`Notice` and interruptible by ``abort``.

- A call is *retried* on 408, 429, 5xx (529 "overloaded" included), a transient error event and a
  broken or stalled connection, but only while none of the response has been handed to the
  caller: re-running a half-delivered answer would duplicate text and tool calls.
- Waits use exponential backoff with full jitter (base 1 s, cap 30 s), unless the server said how
  long to wait (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date).
- 400, 401, 403 and other 4xx are final: retrying cannot fix a bad request or a bad key.

Each attempt runs on the caller's thread (:func:`guarded`); a stop or a stall interrupts the
SDK's blocked I/O from one shared watcher thread (see :mod:`.interrupt` for how and why), so a
stop lands within ``POLL_SECONDS`` even while the SDK is blocked reading a silent socket. An SDK
client whose I/O cannot be tracked falls back to :func:`relay`: the attempt in a daemon thread
of its own, abandoned on a stop (it ends at its next event or at the read timeout).
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from iris_runtime.engine.provider import Notice, ProviderError, ProviderEvent
from iris_runtime.engine.tools import RAW_ARGUMENTS
from iris_runtime.providers import interrupt

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
BASE_DELAY = 1.0
MAX_DELAY = 30.0
# A server asking for a longer pause than this is saying "not now": give up instead of
# holding a run for minutes.
MAX_RETRY_AFTER = 60.0
POLL_SECONDS = interrupt.POLL_SECONDS
# The SDK's own read timeout fires first on a silent socket; this backstop also catches a stream
# that only ever sends keep-alives.
STALL_GRACE = 2.0
DETAIL_MAX_CHARS = 300
RAW_ARGUMENTS_KEY = RAW_ARGUMENTS  # the engine reports these to the model
# Error types (Anthropic's and OpenAI's) of an in-stream error that a new request may not hit.
TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "server_error", "rate_limit_exceeded"}
)

Sleeper = Callable[[float, threading.Event], bool]
"""Waits ``seconds`` unless ``abort`` is set first; returns True when aborted."""


def abort_wait(seconds: float, abort: threading.Event) -> bool:
    return abort.wait(seconds)


@dataclass(frozen=True)
class Failure:
    """One failed attempt, in SDK-neutral terms."""

    reason: str  # short, for the retry notice: "overloaded (529)"
    retryable: bool
    detail: str = ""  # the server's own words
    retry_after: float | None = None

    def describe(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


Item = ProviderEvent | Failure


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int
    base: float = BASE_DELAY
    cap: float = MAX_DELAY
    sleep: Sleeper = abort_wait
    random: Callable[[], float] = field(default=random.random)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return self.random() * min(self.cap, self.base * 2.0**retry)


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``retry-after``."""
    if not headers:
        return None
    lowered = {key.lower(): value.strip() for key, value in headers.items()}
    try:
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
    except ValueError:
        pass
    raw = lowered.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT even when it fails to say so
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_MAX_CHARS else text[: DETAIL_MAX_CHARS - 1] + "…"


def status_failure(
    status: int,
    detail: str,
    headers: Mapping[str, str] | None,
    *,
    key_source: str,
    error_type: str | None = None,
) -> Failure:
    """An HTTP error response before any stream."""
    detail = _clip(detail)
    if status == 401:
        return Failure(f"authentication failed (401): check {key_source}", False, detail)
    if status == 403:
        return Failure("permission denied (403)", False, detail)
    if status == 529 or (status >= 500 and error_type == "overloaded_error"):
        reason, retryable = f"overloaded ({status})", True
    elif status == 429:
        reason, retryable = "rate limited (429)", True
    elif status >= 500 or status == 408:
        reason, retryable = f"server error ({status})", True
    else:
        reason, retryable = f"request rejected ({status})", False
    hint = {k.lower(): v for k, v in (headers or {}).items()}.get("x-should-retry")
    if hint in ("true", "false"):  # the server knows better than the status code
        retryable = hint == "true"
    return Failure(reason, retryable, detail, parse_retry_after(headers))


def stream_error_failure(error_type: str | None, detail: str) -> Failure:
    """An error reported inside an already started stream."""
    reason = (error_type or "error").removesuffix("_error").replace("_", " ")
    retryable = error_type is None or error_type in TRANSIENT_ERROR_TYPES
    return Failure(f"{reason} (in stream)", retryable, _clip(detail))


def connection_failure(exc: BaseException, *, timeout: float) -> Failure:
    """A transport failure. The SDKs wrap the httpx2 error they hit (as ``__cause__``), except
    inside a stream, where it surfaces as is."""
    root = exc if isinstance(exc, httpx2.HTTPError) else exc.__cause__ or exc
    if isinstance(root, httpx2.ConnectTimeout):
        return Failure(f"could not connect within {CONNECT_TIMEOUT:g}s", True)
    if isinstance(root, httpx2.TimeoutException):
        return Failure(f"no data for {timeout:g}s (stream stalled)", True)
    text = str(root)
    return Failure(
        "connection error", True, _clip(f"{type(root).__name__}: {text}" if text else "")
    )


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool-call arguments from their JSON text.

    Malformed JSON (or JSON that is not an object) still becomes a tool call, with the text under
    ``_raw_arguments``: the engine's ToolRegistry rejects that unknown key (or reports the real
    arguments missing), so the model gets an error result it can correct and the loop goes on.
    """
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: raw}
    return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: raw}


def _stalled(limit: float) -> Failure:
    return Failure(f"no data for {limit:g}s (stream stalled)", True)


def _internal_error(exc: Exception) -> Failure:
    log.exception("provider stream failed")
    return Failure("internal error", False, f"{type(exc).__name__}: {exc}")


def guarded(
    produce: Callable[[], Generator[Item, None, None]],
    abort: threading.Event,
    stall_seconds: float,
) -> Iterator[Item]:
    """Run ``produce`` on this thread, its I/O interrupted when ``abort`` is set or nothing
    arrives for ``stall_seconds`` + ``STALL_GRACE`` (see :mod:`.interrupt`): the same contract
    as :func:`relay` without its thread and queue."""
    limit = stall_seconds + STALL_GRACE
    source = produce()  # before the watch: a produce() that raises leaves nothing watched
    watch = interrupt.watch_call(abort, limit)
    try:
        while not abort.is_set():
            # The stall clock runs while we wait for the server, not while the caller handles
            # the previous item (a transport may take its time).
            watch.touch()
            previous = interrupt.enter_thread(watch)
            try:
                item = next(source, None)
            except Exception as exc:  # a bug here must not hide why the call ended
                item = _internal_error(exc)
            finally:
                interrupt.enter_thread(previous)
            if item is None or abort.is_set():
                return
            if isinstance(item, Failure) and watch.cut == "stall":
                item = _stalled(limit)  # the broken connection was our doing
            watch.pause()
            yield item
    finally:
        with interrupt.watching(watch):  # still watched: a close that blocks can be cut too
            source.close()  # closes the SDK stream (and its connection)
        interrupt.unwatch(watch)


def relay(
    produce: Callable[[], Generator[Item, None, None]],
    abort: threading.Event,
    stall_seconds: float,
    *,
    poll: float = POLL_SECONDS,
) -> Iterator[Item]:
    """Run ``produce`` in a daemon thread and hand over its items.

    Returns at once when ``abort`` is set, and reports a stall when nothing arrives for
    ``stall_seconds`` + ``STALL_GRACE``.
    """
    items: queue.Queue[Item | None] = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        source = produce()
        try:
            for item in source:
                items.put(item)
                if stop.is_set() or abort.is_set():
                    break
        except Exception as exc:  # a bug here must not leave the caller waiting forever
            items.put(_internal_error(exc))
        finally:
            source.close()  # closes the SDK stream (and its connection) in this thread
            items.put(None)

    threading.Thread(target=work, name="iris-provider-stream", daemon=True).start()
    limit = stall_seconds + STALL_GRACE
    deadline = time.monotonic() + limit
    try:
        while not abort.is_set():
            try:
                item = items.get(timeout=poll)
            except queue.Empty:
                if time.monotonic() > deadline:
                    yield _stalled(limit)
                    return
                continue
            if item is None:
                return
            deadline = time.monotonic() + limit
            yield item
    finally:
        stop.set()


def _attempts(count: int) -> str:
    return f"{count} attempt" + ("" if count == 1 else "s")


def _seconds(delay: float) -> str:
    return f"{delay:.1f}s" if delay < 1 else f"{math.ceil(delay - 0.05):d}s"


def run_with_retries(
    provider: str,
    attempt: Callable[[], Iterator[Item]],
    policy: RetryPolicy,
    abort: threading.Event,
) -> Iterator[ProviderEvent]:
    """Run ``attempt`` until it succeeds, fails for good or retries run out."""
    for retry in range(policy.max_retries + 1):
        failure: Failure | None = None
        produced = False
        for item in attempt():
            if isinstance(item, Failure):
                failure = item
                break
            produced = True
            yield item
        if failure is None or abort.is_set():
            return
        if produced:
            yield ProviderError(
                f"{provider}: stream failed after partial output: {failure.describe()}"
            )
            return
        if not failure.retryable:
            yield ProviderError(f"{provider}: {failure.describe()}")
            return
        if retry == policy.max_retries:
            message = f"giving up after {_attempts(retry + 1)}: {failure.describe()}"
            yield ProviderError(f"{provider}: {message}", retryable=True)
            return
        if failure.retry_after is not None and failure.retry_after > MAX_RETRY_AFTER:
            message = f"{failure.describe()} (the server asked to wait {failure.retry_after:.0f}s)"
            yield ProviderError(f"{provider}: {message}", retryable=True)
            return
        delay = policy.delay(retry, failure.retry_after)
        yield Notice(f"retrying in {_seconds(delay)}: {failure.reason}")
        if policy.sleep(delay, abort):
            return

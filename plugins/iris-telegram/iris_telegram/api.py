"""A small Bot API client over ``requests``: one method call, retried when the failure is
transient, with errors that never carry the token.

Transient: a connection error or timeout, a 5xx, a 429 (waits ``retry_after``), an answer that is
not the Bot API's JSON. Permanent (raised at once): any other 4xx. A 409 from ``getUpdates`` is
:class:`TelegramConflict` and a 401 :class:`TelegramUnauthorized`, for the poller to explain.
Backoff doubles from ``RetryPolicy.base`` up to ``RetryPolicy.cap``; waiting is cut short when
the transport stops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import random
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests

from iris_runtime.errors import IrisError
from iris_telegram.redaction import redact

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT = 60.0
IDLE_SESSIONS = 8  # HTTP sessions (keep-alive connections) kept for reuse between calls
MAX_RETRY_AFTER = 300.0  # seconds: a longer retry_after is capped

T = TypeVar("T")


class TelegramError(IrisError):
    """A Bot API call failed; ``description`` is Telegram's (or the network's) reason."""

    code = "telegram_error"
    status = 502

    def __init__(
        self,
        method: str,
        description: str,
        *,
        error_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"Telegram {method}: {description}")
        self.method = method
        self.description = description
        self.error_code = error_code
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        return self.error_code is None or self.error_code == 429 or self.error_code >= 500


class TelegramConflict(TelegramError):
    """409: another process polls with this token, or a webhook is set."""


class TelegramUnauthorized(TelegramError):
    """401: Telegram does not know this token."""


class TelegramChatNotFound(TelegramError):
    """400 "chat not found": no such chat, or the bot is not in it. A ``tg-`` id that names
    no chat the bot can reach is a channel that does not exist, hence 404 at the API."""

    code = "no_such_channel"
    status = 404


class TelegramStopped(TelegramError):
    """The transport stopped while a call was waiting to retry."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    base: float = 0.5
    cap: float = 30.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures (with a little jitter)."""
        plain = min(self.cap, self.base * 2.0 ** max(0, failures - 1))
        jitter: float = random.uniform(0.85, 1.0)  # noqa: S311 (jitter, not cryptography)
        return plain * jitter


def _form_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class BotApi:
    """Calls one bot's API. Safe to share between threads: each call borrows an HTTP session
    from a small pool, so concurrent calls never share one and idle connections are reused."""

    def __init__(
        self,
        token: str,
        base_url: str,
        *,
        retry: RetryPolicy | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self._token = token
        self._base = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._stopping = stopping or threading.Event()
        self._idle: queue.LifoQueue[requests.Session] = queue.LifoQueue()

    def __repr__(self) -> str:
        return f"BotApi(base_url={self._base!r})"

    @property
    def bot_id(self) -> str:
        """The numeric id before the token's colon (not secret: it is the bot's user id)."""
        head = self._token.split(":", 1)[0]
        return head if head.isdigit() else "bot"

    @contextlib.contextmanager
    def _session(self) -> Iterator[requests.Session]:
        try:
            session = self._idle.get_nowait()
        except queue.Empty:
            session = requests.Session()
        try:
            yield session
        finally:
            if self._stopping.is_set() or self._idle.qsize() >= IDLE_SESSIONS:
                session.close()
            else:
                self._idle.put(session)

    def close(self) -> None:
        """Close idle connections (calls still running close theirs when they end)."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    # -- calls ----------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        files: dict[str, tuple[str, Path, str]] | None = None,
        timeout: float = CALL_TIMEOUT,
        retry: bool = True,
    ) -> Any:
        """The method's ``result``; raises :class:`TelegramError` (after retrying transient
        failures when ``retry``). ``files`` are (name, path, MIME type), streamed from disk."""
        return self._retrying(
            method, lambda: self._call_once(method, params or {}, files, timeout), retry=retry
        )

    def _retrying(self, method: str, attempt: Callable[[], T], *, retry: bool = True) -> T:
        failures = 0
        while True:
            try:
                return attempt()
            except TelegramError as exc:
                if isinstance(exc, TelegramConflict | TelegramUnauthorized):
                    raise
                if not (retry and exc.transient) or failures + 1 >= self.retry.attempts:
                    raise
                failures += 1
                delay = (
                    min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER)
                    if exc.retry_after is not None
                    else self.retry.delay(failures)
                )
                log.warning(
                    "Telegram %s failed (%s); retrying in %.1f s (attempt %d of %d)",
                    method,
                    exc.description,
                    delay,
                    failures + 1,
                    self.retry.attempts,
                )
            # Outside the except block: the error raised here carries no context.
            if self._stopping.wait(delay):
                raise TelegramStopped(method, "stopped while waiting to retry")

    def _url(self, path: str) -> str:
        return f"{self._base}/{path}"

    def _post(
        self,
        method: str,
        params: dict[str, Any],
        files: dict[str, tuple[str, Path, str]] | None,
        timeout: float,
    ) -> requests.Response | str:
        """The answer, or a redacted reason when the request failed. The URL (it holds the
        token) lives only in this frame, which is gone before anything is raised."""
        url = self._url(f"bot{self._token}/{method}")
        try:
            with self._session() as session, contextlib.ExitStack() as stack:
                if files:
                    data = {k: _form_value(v) for k, v in params.items() if v is not None}
                    uploads = {
                        field: (name, stack.enter_context(path.open("rb")), mime)
                        for field, (name, path, mime) in files.items()
                    }
                    return session.post(
                        url, data=data, files=uploads, timeout=(CONNECT_TIMEOUT, timeout)
                    )
                return session.post(url, json=params, timeout=(CONNECT_TIMEOUT, timeout))
        except requests.RequestException as exc:
            return redact(f"{type(exc).__name__}: {exc}", self._token)

    def _call_once(
        self,
        method: str,
        params: dict[str, Any],
        files: dict[str, tuple[str, Path, str]] | None,
        timeout: float,
    ) -> Any:
        answer = self._post(method, params, files, timeout)
        if isinstance(answer, str):
            # Raised here, with no exception chain and no URL anywhere in this frame.
            raise TelegramError(method, f"network error: {answer}")
        return self._result(method, answer)

    def _result(self, method: str, response: requests.Response) -> Any:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, dict) and payload.get("ok") is True:
            return payload.get("result")
        status = response.status_code
        if not isinstance(payload, dict):
            code = status if status >= 400 else 502
            raise TelegramError(method, f"HTTP {status} without a Bot API answer", error_code=code)
        raw_code = payload.get("error_code")
        code = raw_code if isinstance(raw_code, int) else status
        description = redact(str(payload.get("description") or f"HTTP {status}"), self._token)
        parameters = payload.get("parameters")
        retry_after = None
        if isinstance(parameters, dict) and isinstance(parameters.get("retry_after"), int | float):
            retry_after = float(parameters["retry_after"])
        kind: type[TelegramError] = TelegramError
        if code == 409:
            kind = TelegramConflict
        elif code == 401:
            kind = TelegramUnauthorized
        elif code == 400 and "chat not found" in description.lower():
            kind = TelegramChatNotFound
        raise kind(method, description, error_code=code, retry_after=retry_after)

    # -- files ----------------------------------------------------------------------------------

    def download(self, file_path: str, destination: Path, max_bytes: int) -> int:
        """Fetch a file ``getFile`` named into ``destination`` (written whole or not at all);
        returns its size. Transient failures are retried like calls."""
        return self._retrying(
            "download", lambda: self._download_once(file_path, destination, max_bytes)
        )

    def _fetch(self, file_path: str, partial: Path, max_bytes: int) -> int | str:
        """The size written to ``partial``, or a redacted reason when the request failed."""
        quoted = urllib.parse.quote(file_path, safe="/")
        url = self._url(f"file/bot{self._token}/{quoted}")
        try:
            with (
                self._session() as session,
                session.get(url, stream=True, timeout=(CONNECT_TIMEOUT, 120)) as response,
            ):
                if response.status_code != 200:
                    return -response.status_code
                size = 0
                with partial.open("wb") as out:
                    for block in response.iter_content(64 * 1024):
                        size += len(block)
                        if size > max_bytes:
                            return -413
                        out.write(block)
                return size
        except requests.RequestException as exc:
            return redact(f"{type(exc).__name__}: {exc}", self._token)

    def _download_once(self, file_path: str, destination: Path, max_bytes: int) -> int:
        partial = destination.with_name(f".{destination.name}.part")
        try:
            result = self._fetch(file_path, partial, max_bytes)
            if isinstance(result, str):
                raise TelegramError("download", f"network error: {result}")
            if result == -413:
                raise TelegramError(
                    "download", f"the file is larger than {max_bytes} bytes", error_code=413
                )
            if result < 0:
                raise TelegramError("download", f"HTTP {-result}", error_code=-result)
            partial.replace(destination)
            return result
        finally:
            partial.unlink(missing_ok=True)

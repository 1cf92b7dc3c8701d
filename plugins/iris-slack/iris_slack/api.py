"""The Web API calls the transport makes, through the official ``slack_sdk`` WebClient, with
retries: ``ratelimited`` (HTTP 429) waits for ``Retry-After``, 5xx answers and network errors back
off exponentially (with jitter). Other errors (``not_in_channel``, ``msg_too_long``…) are final
and raised at once as :class:`SlackError` with Slack's error code.

A post is not idempotent: when the connection fails after the request went out (a reset or a
read timeout, so Slack may have applied it), ``chat.postMessage`` is not simply sent again: the
conversation is read back first (``conversations.replies`` or ``.history``) and the post found
there is taken as the answer. A failure before the request was sent (connecting) is retried.

Tokens go only in request headers; nothing here logs them, nor the texts being sent.
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web import SlackResponse

from iris_slack.config import SlackConfig

log = logging.getLogger(__name__)

# Error codes Slack documents as temporary.
TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
# A refused credential or app: retrying cannot help (the transport stops with one error line).
REFUSED_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "not_allowed_token_type",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "missing_scope",
        "team_disabled",
        "no_permission",
    }
)
MAX_RETRY_AFTER_SECONDS = 60.0
DOWNLOAD_BLOCK_BYTES = 64 * 1024


class SlackError(Exception):
    """A Web API call that failed for good: ``error`` is Slack's code (or what went wrong)."""

    def __init__(self, method: str, error: str, *, transient: bool = False) -> None:
        super().__init__(f"{method} failed: {error}")
        self.method = method
        self.error = error
        self.transient = transient

    @property
    def refused(self) -> bool:
        """The token or app is refused: nothing will work until someone fixes it."""
        return self.error in REFUSED_ERRORS


def classify(method: str, exc: BaseException) -> SlackError:
    """Any failure of a Web API call (ours, or one the SDK made on its own threads) as a
    :class:`SlackError`: Slack's code, and whether trying again may help."""
    if isinstance(exc, SlackError):
        return exc
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        data = getattr(response, "data", None)
        error = str((data.get("error") if isinstance(data, dict) else None) or "")
        if status == 429 or error == "ratelimited":
            return SlackError(method, "ratelimited", transient=True)
        transient = status >= 500 or error in TRANSIENT_ERRORS
        return SlackError(method, error or f"http_{status}", transient=transient)
    return SlackError(method, type(exc).__name__, transient=True)  # the network


def _maybe_applied(exc: BaseException) -> bool:
    """Whether a network failure may have come after Slack got the whole request: urllib
    wraps failures while connecting and sending in URLError; a reset or timeout while waiting
    for the answer is raised as it is."""
    return isinstance(exc, (OSError, http.client.HTTPException)) and not isinstance(
        exc, urllib.error.URLError
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A file URL that redirects (to Slack's login page, or anywhere else) is a failure: the
    bot token must never follow a redirect to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class SlackApi:
    def __init__(
        self,
        config: SlackConfig,
        *,
        stopping: threading.Event | None = None,
        attempts: int = 7,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
        timeout: int = 30,
    ) -> None:
        self._config = config
        self._stopping = stopping or threading.Event()
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._timeout = timeout
        # Our own retry loop below replaces the SDK's handlers, so nothing is retried twice.
        self.client = WebClient(
            token=config.bot_token,
            base_url=config.api_url,
            timeout=timeout,
            retry_handlers=[],
            logger=sdk_logger(),
        )
        self.bot_user_id: str | None = None  # learnt from auth.test; finds our own posts
        self._opener = urllib.request.build_opener(_NoRedirect)

    # -- the retry loop -----------------------------------------------------------------------

    def backoff(self, attempt: int) -> float:
        """Exponential, capped, with jitter (half to all of the step)."""
        step = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return step * (0.5 + random.random() / 2)  # noqa: S311 (jitter, not security)

    def call(
        self,
        method: str,
        send: Callable[[], Any],
        *,
        attempts: int | None = None,
        applied: Callable[[], Any] | None = None,
    ) -> Any:
        """``send()`` until it succeeds, a final error occurs or the attempts run out.

        ``applied`` is for calls that must not happen twice: after a failure that may have come
        after Slack applied the request, it is asked before sending again; what it returns
        (not None) is taken as the call's answer."""
        total = attempts or self.attempts
        for attempt in range(1, total + 1):
            ambiguous = False
            try:
                return send()
            except SlackApiError as exc:
                status, error, delay = self._classify(exc.response, attempt)
                if delay is None:
                    raise SlackError(method, error or f"http_{status}") from None
                reason = error or f"http_{status}"
            except (OSError, http.client.HTTPException, SlackRequestError, ValueError) as exc:
                reason, delay = type(exc).__name__, self.backoff(attempt)
                ambiguous = applied is not None and _maybe_applied(exc)
            if attempt == total or self._stopping.is_set():
                raise SlackError(method, reason, transient=True)
            if ambiguous:
                assert applied is not None
                try:
                    found = applied()
                except SlackError as exc:  # cannot tell: sending again could duplicate it
                    raise SlackError(
                        method, f"{reason}; may have been applied ({exc.error})", transient=True
                    ) from None
                if found is not None:
                    log.info("slack: %s failed (%s) but had been applied", method, reason)
                    return found
            log.warning(
                "slack: %s failed (%s); retrying in %.1fs (attempt %d of %d)",
                method,
                reason,
                delay,
                attempt,
                total,
            )
            if self._stopping.wait(delay):
                raise SlackError(method, f"{reason}; not retried while stopping", transient=True)
        raise AssertionError("unreachable")

    def _classify(self, response: SlackResponse, attempt: int) -> tuple[int, str, float | None]:
        status = response.status_code
        data = response.data if isinstance(response.data, dict) else {}
        error = str(data.get("error") or "")
        if status == 429 or error == "ratelimited":
            return status, "ratelimited", self._retry_after(response.headers, attempt)
        if status >= 500 or error in TRANSIENT_ERRORS:
            return status, error, self.backoff(attempt)
        return status, error, None

    def _retry_after(self, headers: Any, attempt: int) -> float:
        for name, value in dict(headers or {}).items():
            if str(name).lower() == "retry-after":
                raw = value[0] if isinstance(value, list) else value
                try:
                    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, float(raw)))
                except (TypeError, ValueError):
                    break
        return self.backoff(attempt)

    # -- methods ------------------------------------------------------------------------------

    def auth_test(self) -> dict[str, Any]:
        identity = self._data(self.call("auth.test", self.client.auth_test))
        self.bot_user_id = str(identity.get("user_id") or "") or None
        return identity

    def post_message(
        self, channel: str, text: str, thread_ts: str | None = None, *, attempts: int | None = None
    ) -> str:
        """Post already-escaped ``text``; returns the new message's ts."""

        since = f"{time.time() - 5:.6f}"  # Slack ts are epoch seconds (allowing for skew)

        def send() -> SlackResponse:
            return self.client.chat_postMessage(channel=channel, text=text, thread_ts=thread_ts)

        def applied() -> dict[str, Any] | None:
            return self._own_post(channel, text, thread_ts, since)

        answer = self.call("chat.postMessage", send, attempts=attempts, applied=applied)
        return str(self._data(answer)["ts"])

    def _own_post(
        self, channel: str, text: str, thread_ts: str | None, since: str
    ) -> dict[str, Any] | None:
        """Our message reading ``text`` posted in the thread (or channel) since ``since``."""
        if thread_ts is not None:
            method = "conversations.replies"

            def read() -> SlackResponse:
                return self.client.conversations_replies(
                    channel=channel, ts=thread_ts, oldest=since, limit=200
                )
        else:
            method = "conversations.history"

            def read() -> SlackResponse:
                return self.client.conversations_history(channel=channel, oldest=since, limit=200)

        data = self._data(self.call(method, read, attempts=3))
        for message in data.get("messages") or []:
            if not isinstance(message, dict) or message.get("text") != text:
                continue
            ours = message.get("bot_id") or (
                self.bot_user_id is not None and message.get("user") == self.bot_user_id
            )
            if ours and str(message.get("ts") or "") > since:
                return {"ok": True, "channel": channel, "ts": message["ts"]}
        return None

    def update_message(
        self,
        channel: str,
        ts: str,
        text: str,
        *,
        attempts: int | None = None,
        slot: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        """Edit a message; ``slot`` (the channel's edit pacing) is held around every attempt,
        so a retry is paced like any other edit."""

        def send() -> SlackResponse:
            with slot() if slot is not None else nullcontext():
                return self.client.chat_update(channel=channel, ts=ts, text=text)

        self.call("chat.update", send, attempts=attempts)

    def delete_message(self, channel: str, ts: str, *, attempts: int | None = None) -> None:
        def send() -> SlackResponse:
            return self.client.chat_delete(channel=channel, ts=ts)

        self.call("chat.delete", send, attempts=attempts)

    def conversations(self) -> Iterator[dict[str, Any]]:
        """Every conversation the bot can see (public and private channels, direct messages)."""
        yield from self._pages(
            "conversations.list",
            "channels",
            lambda cursor: self.client.conversations_list(
                types="public_channel,private_channel,im",
                exclude_archived=True,
                limit=200,
                cursor=cursor,
            ),
        )

    def users(self) -> Iterator[dict[str, Any]]:
        yield from self._pages(
            "users.list",
            "members",
            lambda cursor: self.client.users_list(limit=200, cursor=cursor),
        )

    def conversation_info(self, channel: str) -> dict[str, Any] | None:
        return self._lookup(
            "conversations.info",
            "channel",
            lambda: self.client.conversations_info(channel=channel),
            {"channel_not_found", "not_in_channel", "method_not_supported_for_channel_type"},
        )

    def user_info(self, user: str) -> dict[str, Any] | None:
        return self._lookup(
            "users.info",
            "user",
            lambda: self.client.users_info(user=user),
            {"user_not_found", "user_not_visible"},
        )

    def upload_file(
        self, channel: str, thread_ts: str | None, path: Path, title: str | None
    ) -> None:
        """Upload through the current API (files.getUploadURLExternal, the upload URL, then
        files.completeUploadExternal), shared into the channel's thread."""

        def send() -> SlackResponse:
            return self.client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                file=str(path),
                filename=path.name,
                title=title or path.name,
            )

        self.call("files.upload_v2", send)

    def download(self, url: str, max_bytes: int, target: Path) -> None:
        """Write a shared file's content (``url_private_download``) to ``target`` (created
        mode 0600, replaced on every attempt), streamed with a byte count: at most
        ``max_bytes`` are ever held or written. The bot token is sent only when the URL is
        https on Slack's file host (or the configured API's own host)."""
        parts = urlsplit(url)
        secure = parts.scheme == "https" or (
            parts.scheme == "http" and urlsplit(self._config.api_url).scheme == "http"
        )
        if not secure or parts.netloc.lower() not in self._config.file_hosts:
            raise SlackError("files.download", "untrusted_file_url")

        def fetch() -> None:
            request = urllib.request.Request(  # noqa: S310 (scheme and host checked above)
                url, headers={"Authorization": f"Bearer {self._config.bot_token}"}
            )
            try:
                with (
                    self._opener.open(request, timeout=self._timeout) as response,
                    _private_file(target) as out,
                ):
                    _copy_at_most(response, out, max_bytes)
            except urllib.error.HTTPError as exc:
                if exc.code >= 500 or exc.code == 429:
                    raise OSError(f"HTTP {exc.code}") from None
                raise SlackError("files.download", f"http_{exc.code}") from None

        try:
            self.call("files.download", fetch)
        except BaseException:
            target.unlink(missing_ok=True)
            raise

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _data(response: Any) -> dict[str, Any]:
        data = getattr(response, "data", response)
        return data if isinstance(data, dict) else {}

    def _pages(
        self, method: str, key: str, fetch: Callable[[str | None], SlackResponse]
    ) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        for _ in range(1000):  # a bound, should a server hand out cursors forever
            data = self._data(self.call(method, lambda c=cursor: fetch(c)))  # type: ignore[misc]
            for item in data.get(key) or []:
                if isinstance(item, dict):
                    yield item
            cursor = str((data.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return

    def _lookup(
        self, method: str, key: str, send: Callable[[], SlackResponse], missing: set[str]
    ) -> dict[str, Any] | None:
        try:
            data = self._data(self.call(method, send))
        except SlackError as exc:
            if exc.error in missing:
                return None
            raise
        found = data.get(key)
        return found if isinstance(found, dict) else None


def sdk_logger(name: str = "iris_slack.sdk") -> logging.Logger:
    """The logger the SDK clients get. The SDK builds debug strings of whole request and answer
    bodies when its logger allows debug, so it is held at INFO unless debug logging was asked
    for (the root logger at DEBUG)."""
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET and logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.INFO)
    return logger


def _private_file(path: Path) -> Any:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return os.fdopen(fd, "wb")


def _copy_at_most(source: Any, out: Any, max_bytes: int) -> None:
    """Copy ``source`` to ``out`` in blocks; more than ``max_bytes`` is ``file_too_large``."""
    total = 0
    while block := source.read(DOWNLOAD_BLOCK_BYTES):
        total += len(block)
        if total > max_bytes:
            raise SlackError("files.download", "file_too_large")
        out.write(block)

"""The Web API calls the transport makes, through the official ``slack_sdk`` WebClient, with
retries: ``ratelimited`` (HTTP 429) waits for ``Retry-After``, 5xx answers and network errors back
off exponentially (with jitter). Other errors (``not_in_channel``, ``msg_too_long``…) are final
and raised at once as :class:`SlackError` with Slack's error code.

Tokens go only in request headers; nothing here logs them, nor the texts being sent.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
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
MAX_RETRY_AFTER_SECONDS = 60.0


class SlackError(Exception):
    """A Web API call that failed for good: ``error`` is Slack's code (or what went wrong)."""

    def __init__(self, method: str, error: str, *, transient: bool = False) -> None:
        super().__init__(f"{method} failed: {error}")
        self.method = method
        self.error = error
        self.transient = transient


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
            logger=logging.getLogger("iris_slack.sdk"),
        )
        self._opener = urllib.request.build_opener(_NoRedirect)

    # -- the retry loop -----------------------------------------------------------------------

    def backoff(self, attempt: int) -> float:
        """Exponential, capped, with jitter (half to all of the step)."""
        step = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return step * (0.5 + random.random() / 2)  # noqa: S311 (jitter, not security)

    def call(self, method: str, send: Callable[[], Any], *, attempts: int | None = None) -> Any:
        """``send()`` until it succeeds, a final error occurs or the attempts run out."""
        total = attempts or self.attempts
        for attempt in range(1, total + 1):
            try:
                return send()
            except SlackApiError as exc:
                status, error, delay = self._classify(exc.response, attempt)
                if delay is None:
                    raise SlackError(method, error or f"http_{status}") from None
                reason = error or f"http_{status}"
            except (OSError, http.client.HTTPException, SlackRequestError, ValueError) as exc:
                reason, delay = type(exc).__name__, self.backoff(attempt)
            if attempt == total or self._stopping.is_set():
                raise SlackError(method, reason, transient=True)
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
        return self._data(self.call("auth.test", self.client.auth_test))

    def post_message(
        self, channel: str, text: str, thread_ts: str | None = None, *, attempts: int | None = None
    ) -> str:
        """Post already-escaped ``text``; returns the new message's ts."""

        def send() -> SlackResponse:
            return self.client.chat_postMessage(channel=channel, text=text, thread_ts=thread_ts)

        return str(self._data(self.call("chat.postMessage", send, attempts=attempts))["ts"])

    def update_message(
        self, channel: str, ts: str, text: str, *, attempts: int | None = None
    ) -> None:
        def send() -> SlackResponse:
            return self.client.chat_update(channel=channel, ts=ts, text=text)

        self.call("chat.update", send, attempts=attempts)

    def delete_message(self, channel: str, ts: str) -> None:
        self.call("chat.delete", lambda: self.client.chat_delete(channel=channel, ts=ts))

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

    def download(self, url: str, max_bytes: int) -> bytes:
        """A shared file's content (``url_private_download``), sent the bot token only when the
        URL is https on Slack's file host (or the configured API's own host)."""
        parts = urlsplit(url)
        secure = parts.scheme == "https" or (
            parts.scheme == "http" and urlsplit(self._config.api_url).scheme == "http"
        )
        if not secure or parts.netloc.lower() not in self._config.file_hosts:
            raise SlackError("files.download", "untrusted_file_url")

        def fetch() -> bytes:
            request = urllib.request.Request(  # noqa: S310 (scheme and host checked above)
                url, headers={"Authorization": f"Bearer {self._config.bot_token}"}
            )
            try:
                with self._opener.open(request, timeout=self._timeout) as response:
                    data: bytes = response.read(max_bytes + 1)
            except urllib.error.HTTPError as exc:
                if exc.code >= 500 or exc.code == 429:
                    raise OSError(f"HTTP {exc.code}") from None
                raise SlackError("files.download", f"http_{exc.code}") from None
            if len(data) > max_bytes:
                raise SlackError("files.download", "file_too_large")
            return data

        result: bytes = self.call("files.download", fetch)
        return result

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

"""The bot's connection to Slack: who it is (``auth.test``) and its Socket Mode WebSocket.

Connecting happens on a thread of its own, so the engine's start never waits for Slack. Every
step is retried with backoff until it works or Iris stops; a refused credential ends the
attempts with one error line, and Slack stays off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web import WebClient

from iris_slack.api import SlackApi, classify, sdk_logger
from iris_slack.config import SlackConfig
from iris_slack.socket_mode import SocketModeClient

log = logging.getLogger(__name__)

RequestListener = Callable[[Any, SocketModeRequest], None]


class SlackConnection:
    def __init__(
        self,
        config: SlackConfig,
        api: SlackApi,
        stopping: threading.Event,
        *,
        on_request: RequestListener,
        on_connected: Callable[[], None],
    ) -> None:
        self._config = config
        self._api = api
        self._stopping = stopping
        self._on_request = on_request
        self._on_connected = on_connected
        self.connected = threading.Event()
        self.bot_user_id: str | None = None
        self._lock = threading.Lock()
        self._socket: SocketModeClient | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._connect, name="iris-slack-connect", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Close the WebSocket (the caller has set ``stopping``, which ends any retries)."""
        with self._lock:
            socket, self._socket = self._socket, None
        if socket is not None:
            try:
                socket.close()
            except Exception:
                log.exception("slack: closing the Socket Mode connection failed")
        if self._thread is not None:
            self._thread.join(10)

    def _connect(self) -> None:
        identity = self._retry_until_stopped("auth.test", self._api.auth_test)
        if identity is None:
            return
        self.bot_user_id = str(identity.get("user_id") or "") or None
        # The SDK's built-in Socket Mode client, not its websocket-client adapter: the adapter's
        # monitor reconnects while the first WebSocket is still opening, which leaves Slack an
        # orphan connection that gets events nobody reads (see iris_slack.socket_mode).
        client = SocketModeClient(
            app_token=self._config.app_token,
            web_client=self._socket_web_client(),
            logger=sdk_logger("iris_slack.socket_mode"),
            auto_reconnect_enabled=True,
            # A ping every 5 s; a connection without a pong for 20 s is dropped, and a lost one
            # is replaced at the monitor's next check (it runs at this interval too).
            ping_interval=5,
            # Bytes per read: the SDK parses a frame recursively, one read per level, so at its
            # 1 KiB default a frame of about 1 MB passes Python's recursion limit.
            receive_buffer_size=64 * 1024,
            # One listener call at a time, in delivery order: it only acknowledges and queues
            # the event on its channel's lane (see OrderedLanes).
            concurrency=1,
        )
        client.socket_mode_request_listeners.append(self._on_request)
        with self._lock:
            if self._stopping.is_set():
                client.close()
                return
            self._socket = client

        def connect() -> None:
            # Through the client's own lock, as its monitor reconnects, and only while it has
            # no open connection (the monitor may have opened one after a failed attempt).
            client.connect_to_new_endpoint()
            if not client.is_connected():  # the SDK logs why the WebSocket did not open
                raise ConnectionError("the Socket Mode WebSocket did not open")

        if self._retry_until_stopped("apps.connections.open", connect, result=False) is None:
            return
        self.connected.set()
        log.info("slack: connected over Socket Mode as %s", identity.get("user") or "the bot")
        self._on_connected()

    def _socket_web_client(self) -> WebClient:
        # The Socket Mode client opens (and re-opens) its connection with apps.connections.open;
        # give that call the SDK's retry handlers, with backoff, since it runs on SDK threads.
        backoff = BackoffRetryIntervalCalculator(backoff_factor=0.5)
        return WebClient(
            token=self._config.bot_token,
            base_url=self._config.api_url,
            timeout=30,
            logger=sdk_logger(),
            retry_handlers=[
                ConnectionErrorRetryHandler(max_retry_count=4, interval_calculator=backoff),
                ServerErrorRetryHandler(max_retry_count=4, interval_calculator=backoff),
                RateLimitErrorRetryHandler(max_retry_count=4),
            ],
        )

    def _retry_until_stopped(self, what: str, action: Any, *, result: bool = True) -> Any:
        """Run ``action`` until it works (True when it returns nothing) or Iris stops; a refused
        credential ends the attempts (Slack stays off, with one error line)."""
        attempt = 0
        while not self._stopping.is_set():
            attempt += 1
            try:
                value = action()
                return value if result else True
            except Exception as exc:  # ours, the SDK's own errors and plain network errors
                failure = classify(what, exc)
                if failure.refused or not failure.transient:
                    log.error("slack: %s was refused (%s); Slack stays off", what, failure.error)
                    return None
                reason = failure.error
            delay = self._api.backoff(min(attempt, 8))
            log.warning("slack: %s failed (%s); trying again in %.0fs", what, reason, delay)
            self._stopping.wait(delay)
        return None

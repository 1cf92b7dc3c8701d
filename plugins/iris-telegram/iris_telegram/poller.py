"""Long polling: ``getMe`` once, then ``getUpdates`` in a loop, on one thread.

The offset is saved after the updates below it were handed over, with the updates not settled
yet (see :mod:`iris_telegram.offsets`): the handler settles an update when it returns, unless it
returns True ("settled later": the transport settles a message when its run starts or is
refused). After a restart the unsettled ones are handed over again first. When the engine
refuses new work because it is shutting down, that update stays unsettled too.

Failures are told apart, each explained once per episode and retried with backoff:

- 409 Conflict: another process polls with the same token (or a webhook is set). Logged once as
  an error naming the cause, then polling backs off; it must never look like a quiet bot. Two
  pollers take turns (each poll ends the other's), so a poll that works between two conflicts
  does not end the episode: it ends only after a quiet period (twice the longer of the backoff
  cap and the poll timeout) without a 409, and the backoff keeps growing until then.
- 401 Unauthorized: Telegram does not know the token.
- anything else (network, 5xx, 429): a warning, then backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from iris_runtime.errors import EngineStopping
from iris_telegram.api import (
    BotApi,
    TelegramConflict,
    TelegramError,
    TelegramStopped,
    TelegramUnauthorized,
)
from iris_telegram.offsets import OffsetStore, UpdateLedger

log = logging.getLogger(__name__)

MAX_RETRY_AFTER = (
    300.0  # seconds: a longer retry_after from Telegram is capped (as the client does)
)

CONFLICT_EXPLAINED = (
    "Telegram answered getUpdates with 409 Conflict (%s): another process is polling Telegram "
    "with this same bot token, and Telegram gives updates to only one of them. This Iris will "
    "miss messages while that lasts. Stop the other process, or give it its own bot: a "
    "sub-agent must never reuse TELEGRAM_BOT_TOKEN. Polling backs off and retries; a line is "
    "logged when it works again."
)
WEBHOOK_EXPLAINED = (
    "Telegram answered getUpdates with 409 Conflict (%s): a webhook is set for this bot, and "
    "Telegram does not allow polling while it is. Remove the webhook (Bot API deleteWebhook) "
    "to let Iris receive messages. Polling backs off and retries."
)
UNAUTHORIZED_EXPLAINED = (
    "Telegram rejected TELEGRAM_BOT_TOKEN (401 Unauthorized): the token was revoked or is "
    "wrong. Get the current one from BotFather. Iris keeps retrying with backoff."
)


class Poller:
    def __init__(
        self,
        api: BotApi,
        offsets: OffsetStore,
        handle: Callable[[dict[str, Any]], bool | None],
        *,
        poll_timeout: int,
        stopping: threading.Event,
        on_identity: Callable[[dict[str, Any]], None],
    ) -> None:
        self._api = api
        self._offsets = offsets
        self._handle = handle
        self._poll_timeout = poll_timeout
        self._stopping = stopping
        self._on_identity = on_identity
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._problem: str | None = None  # the episode being explained: conflict/auth/network
        self._last_conflict = 0.0  # monotonic time of the latest 409
        # A conflict episode ends after this long without a 409 (see the module's docstring).
        self.conflict_quiet = 2.0 * max(api.retry.cap, float(poll_timeout))
        self._offset: int | None = None
        self._offset_loaded = False
        self.ledger = UpdateLedger()
        self._saved: tuple[int | None, list[dict[str, Any]]] = (None, [])
        self._save_lock = threading.Lock()
        self.polls = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="telegram-poller", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        identified = False
        while not self._stopping.is_set():
            try:
                identified = identified or self._identify()
                if identified:
                    self._poll_forever()
                return
            except Exception:
                # A bug must not silence the bot for good: say so, wait, start over.
                log.exception("the Telegram poller failed; it starts again shortly")
                self._failures += 1
                if self._stopping.wait(self._api.retry.delay(self._failures)):
                    return

    def _identify(self) -> bool:
        while not self._stopping.is_set():
            try:
                me = self._api.call("getMe", retry=False)
            except TelegramStopped:
                return False
            except TelegramError as exc:
                if not self._back_off(exc):
                    return False
                continue
            self._recovered(polled=False)
            self._on_identity(me if isinstance(me, dict) else {})
            return True
        return False

    def _poll_forever(self) -> None:
        if not self._offset_loaded:
            offset, unsettled = self._offsets.load_state()
            self._offset, self._offset_loaded = offset, True
            self._saved = (offset, unsettled)
            if unsettled:
                log.info("handing over %d Telegram messages kept at shutdown", len(unsettled))
            _, stopping = self._hand_over(unsettled)
            self.persist()
            if stopping:
                return
        while not self._stopping.is_set():
            params: dict[str, Any] = {"timeout": self._poll_timeout}
            if self._offset is not None:
                params["offset"] = self._offset
            try:
                updates = self._api.call(
                    "getUpdates", params, timeout=self._poll_timeout + 15, retry=False
                )
            except TelegramStopped:
                return
            except TelegramError as exc:
                if not self._back_off(exc):
                    return
                continue
            self.polls += 1
            if self._stopping.is_set():
                return  # not handed over: they come again after the restart
            self._recovered()
            if not isinstance(updates, list):
                log.warning("getUpdates answered something other than a list; ignored")
                continue
            handed, stopping = self._hand_over(updates)
            if handed is not None:
                self._offset = max(self._offset or 0, handed)
            self.persist()
            if stopping:
                return

    def persist(self) -> None:
        """Save the ledger's offset when it changed (any thread)."""
        with self._save_lock:
            state = self.ledger.state()
            offset, unsettled = state
            if offset is None or state == self._saved:
                return
            try:
                self._offsets.save(offset, unsettled)
            except OSError as exc:
                # Polling goes on from the offset in memory; only a restart now would replay.
                log.error("could not save the Telegram offset to %s: %s", self._offsets.path, exc)
                return
            self._saved = state

    def _hand_over(self, updates: list[Any]) -> tuple[int | None, bool]:
        """Handle updates in order; return the offset to poll from next, and whether the
        engine is shutting down (the rest wait for the restart)."""
        offset: int | None = None
        for update in updates:
            update_id = update.get("update_id") if isinstance(update, dict) else None
            if not isinstance(update_id, int) or isinstance(update_id, bool):
                log.warning("ignoring a Telegram update without an update_id")
                continue
            self.ledger.begin(update)
            later = False
            try:
                later = bool(self._handle(update))
            except EngineStopping:
                return offset, True
            except Exception:
                # A bad update must not block the ones after it forever: it is skipped.
                log.exception("could not handle Telegram update %s", update["update_id"])
            if not later:
                self.ledger.settle(update_id)
            offset = max(offset or 0, update_id + 1)
        return offset, False

    # -- failures -------------------------------------------------------------------------------

    def _back_off(self, exc: TelegramError) -> bool:
        """Explain the failure (once per episode) and wait; False when stopping."""
        self._failures += 1
        if isinstance(exc, TelegramConflict):
            kind = "conflict"
            self._last_conflict = time.monotonic()
            explained = WEBHOOK_EXPLAINED if "webhook" in exc.description.lower() else None
            if self._problem != kind:
                log.error(explained or CONFLICT_EXPLAINED, exc.description)
        elif isinstance(exc, TelegramUnauthorized):
            kind = "auth"
            if self._problem != kind:
                log.error(UNAUTHORIZED_EXPLAINED)
        else:
            kind = "network"
            if self._problem != kind:
                log.warning(
                    "Telegram %s failed (%s); polling retries with backoff",
                    exc.method,
                    exc.description,
                )
        if self._problem == kind:
            log.debug("Telegram %s failed again: %s", exc.method, exc.description)
        self._problem = kind
        delay = (
            min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER)
            if exc.retry_after is not None
            else self._api.retry.delay(self._failures)
        )
        return not self._stopping.wait(delay)

    def _recovered(self, *, polled: bool = True) -> None:
        """A call worked. A conflict episode ends only once a poll works after a quiet period
        (``getMe`` cannot conflict, so it proves nothing); any other episode ends now."""
        if self._problem == "conflict" and (
            not polled or time.monotonic() - self._last_conflict < self.conflict_quiet
        ):
            return
        if self._problem is not None:
            log.info("Telegram polling works again (after %d failed attempts)", self._failures)
        self._problem = None
        self._failures = 0

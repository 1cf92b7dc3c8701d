"""Delivering announces from the outbox, exactly once, on one thread of its own.

An announce waits while the run that spawned its sub-agent is still going, so the chat reads
the spawning turn's reply first and the report after it. Delivery then has two steps. First the
announce is appended to the origin chat's session log, carrying its key (``announce: <run id>``):
that entry is what the main agent sees in its next turn, what the API's history shows, and the
proof of delivery a restarted Iris checks before appending again. Then the origin's transport
shows it where the spawn came from (a Slack thread, a Telegram topic, the Web UI conversation); a
headless API session needs nothing more than the log. A transport that fails is retried with a
growing pause; nothing is dropped.

What is left (documented in docs/subagents.md): a crash after a chat platform accepted the post
and before the outbox recorded it shows the announce twice on that platform. The log still
holds it once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import LoggedMessagePoster
from iris_runtime.failpoints import failpoint
from iris_runtime.session_agents.events import subagent_event
from iris_runtime.session_agents.store import Announce, RunRecord, SubagentStore
from iris_runtime.session_agents.worker import Worker

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 300.0
ORIGIN_BUSY_SECONDS = 0.1  # how often an announce held for its spawning run looks again


class AnnounceDelivery(Worker):
    name = "iris-announce"

    def __init__(
        self,
        engine: Engine,
        store: SubagentStore,
        delivered: Callable[[RunRecord], None],
    ) -> None:
        super().__init__()
        self._engine = engine
        self._store = store
        self._delivered = delivered  # e.g. cleanup: delete archives once the announce is out
        self._retry_at: dict[str, float] = {}  # announce key -> when to try it again

    def round(self) -> float | None:
        """Deliver every announce that is due (its first try, or a retry whose time came)."""
        for announce in self._store.undelivered():
            if self.stopping:
                return None
            if self._retry_at.get(announce.key, 0.0) > time.monotonic():
                continue
            if self._engine.running_run(announce.origin_channel) == announce.origin_run:
                self._retry_at[announce.key] = time.monotonic() + ORIGIN_BUSY_SECONDS
                continue
            self._attempt(announce)
        if not self._retry_at:
            return None
        return min(self._retry_at.values()) - time.monotonic()

    def _attempt(self, announce: Announce) -> None:
        try:
            self.deliver(announce)
        except Exception as exc:
            pause = min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** min(announce.attempts, 12))
            self._retry_at[announce.key] = time.monotonic() + pause
            log.warning(
                "announce %s to %s not delivered (%s); retrying in %.0fs",
                announce.key,
                announce.origin_channel,
                exc,
                pause,
            )
            self._store.set_announce(announce.key, announce.state, attempts=announce.attempts + 1)
        else:
            self._retry_at.pop(announce.key, None)

    def deliver(self, announce: Announce) -> None:
        if announce.state == "pending":
            self._log_once(announce)
            failpoint("subagents.announce_logged")
            self._store.set_announce(announce.key, "logged")
        transport = self._engine.transports.get(announce.origin_transport)
        if isinstance(transport, LoggedMessagePoster):
            transport.show_logged_message(
                announce.origin_channel, announce.text, announce.origin_thread
            )
        else:
            transport.post_message(announce.origin_channel, announce.text)
        self._store.set_announce(
            announce.key, "delivered", delivered=time.time(), attempts=announce.attempts + 1
        )
        record = self._store.run(announce.key)
        if record is None:
            return
        self._delivered(record)
        spawn = self._store.spawn_of(record.session_key) or record
        event = subagent_event(spawn, record, "announced")
        self._engine.notify(announce.origin_channel, {**event, "text": announce.text})

    def _log_once(self, announce: Announce) -> None:
        sessions = self._engine.sessions
        logged = sessions.entries(announce.origin_channel)
        if any(entry.get("announce") == announce.key for entry in logged):
            return  # delivered before a crash cut the outbox's record short
        usage: Any = json.loads(announce.usage or "{}")
        sessions.append_message(
            announce.origin_channel,
            "assistant",
            announce.text,
            announce=announce.key,
            posted=True,
            agent=announce.agent,
            usage=usage,
        )

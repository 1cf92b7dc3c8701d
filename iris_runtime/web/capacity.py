"""Held requests: how many may keep a server thread for long, so short ones always find one.

Under gunicorn's gthread worker a request occupies one pool thread until its response ends.
Most requests end in milliseconds, but two kinds are *held* for as long as something is going on:

- ``streams``: a session's SSE stream, a streamed ``POST /bridge`` (NDJSON), a Web UI socket;
- ``waits``: a blocking ``POST /sessions/<id>/message`` and a plain ``POST /bridge``, which wait
  for a model.

Each kind has a fixed number of slots (``IRIS_MAX_STREAMS``, ``IRIS_MAX_WAITS``) and the pool has
``IRIS_THREADS`` threads more than all slots together (see :func:`server_threads`), so however
many streams are open, ``/health``, the API and the pages keep that many threads of their own.
A request over its kind's limit is answered ``503`` with ``Retry-After`` at once, before it
creates anything, instead of queueing silently behind the held ones.

Why threads and not an event loop for held connections: an idle thread costs about 18 kB of
resident memory and no CPU while it waits (measured with 1,000 threads), so 1,000 held streams
cost less than 20 MB and keep one simple threading model for the engine, the SSE and bridge
generators and the Web UI's sockets. Stacks are 1 MiB (:data:`THREAD_STACK_BYTES`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping

from iris_runtime.config import Settings
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

STREAMS = "streams"
WAITS = "waits"
RETRY_AFTER_SECONDS = 5
# C code that recurses (the JSON scanner, the parser) needs more than 256 kB at Python's default
# recursion limit (measured: it overflows there and fits in 512 kB); 1 MiB leaves room. A smaller
# stack saves address space only, not resident memory, so there is nothing to win below that.
THREAD_STACK_BYTES = 1024 * 1024
# Connections gunicorn keeps beyond its threads: kept-alive clients and ones still sending their
# request wait in its poller. Past the total it stops accepting, so leave plenty.
SPARE_CONNECTIONS = 4096
OTHER_DESCRIPTORS = 1024  # logs, job logs, pipes, sockets to models and sub-agents
_WARN_EVERY_SECONDS = 10.0

_VARIABLES = {STREAMS: "IRIS_MAX_STREAMS", WAITS: "IRIS_MAX_WAITS"}
_SINGULAR = {STREAMS: "stream", WAITS: "wait"}


def server_threads(settings: Settings) -> int:
    """gunicorn's thread count: every held slot plus ``IRIS_THREADS`` for everything else."""
    return settings.threads + settings.max_streams + settings.max_waits


def worker_connections(settings: Settings) -> int:
    return server_threads(settings) + SPARE_CONNECTIONS


def descriptors_needed(settings: Settings) -> int:
    """Open files the configured slots may need: a descriptor per connection, one more per
    stream (a Web UI socket's selector), and room for files, pipes and outgoing sockets."""
    return worker_connections(settings) + settings.max_streams + OTHER_DESCRIPTORS


class AtCapacity(IrisError):
    code = "at_capacity"
    status = 503

    def __init__(self, kind: str, limit: int) -> None:
        super().__init__(
            f"all {limit} {_SINGULAR.get(kind, kind)} slots are taken "
            f"({_VARIABLES.get(kind, kind)}); "
            f"retry in {RETRY_AFTER_SECONDS}s"
        )

    def response_headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}


class Slot:
    """One held request's place; :meth:`release` is idempotent (a response may close twice).
    As a context manager it is released on the way out (for waits, which end in the view)."""

    def __init__(self, budget: HeldRequests, kind: str) -> None:
        self._budget = budget
        self._kind = kind
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._budget.give_back(self._kind)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def released_on_failure(self) -> Iterator[Slot]:
        """Kept past the block (a stream keeps it until its response closes), unless the block
        fails: then nothing will ever close, so it is given back now."""
        try:
            yield self
        except BaseException:
            self.release()
            raise


class HeldRequests:
    """Counts the held requests of each kind against its limit. Thread-safe; never blocks."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._limits = dict(limits)
        self._held = dict.fromkeys(self._limits, 0)
        self._lock = threading.Lock()
        self._warned_at = dict.fromkeys(self._limits, -_WARN_EVERY_SECONDS)

    @classmethod
    def from_settings(cls, settings: Settings) -> HeldRequests:
        return cls({STREAMS: settings.max_streams, WAITS: settings.max_waits})

    def hold(self, kind: str) -> Slot:
        """A slot of ``kind``, or :class:`AtCapacity` when all are taken."""
        with self._lock:
            limit = self._limits[kind]
            full = self._held[kind] >= limit
            if not full:
                self._held[kind] += 1
        if full:
            self._warn(kind, limit)  # outside the lock: a slow log must not hold up releases
            raise AtCapacity(kind, limit)
        return Slot(self, kind)

    def give_back(self, kind: str) -> None:
        with self._lock:
            self._held[kind] = max(0, self._held[kind] - 1)

    def in_use(self) -> dict[str, tuple[int, int]]:
        """Held and limit, by kind (``GET /health`` shows them)."""
        with self._lock:
            return {kind: (self._held[kind], self._limits[kind]) for kind in self._limits}

    def _warn(self, kind: str, limit: int) -> None:
        """Once per interval, not once per refused request: a full server refuses many."""
        now = time.monotonic()
        with self._lock:
            due = now - self._warned_at[kind] >= _WARN_EVERY_SECONDS
            if due:
                self._warned_at[kind] = now
        if due:
            log.warning(
                "refusing new %s with 503: all %d are open (raise %s to allow more)",
                kind,
                limit,
                _VARIABLES.get(kind, kind),
            )

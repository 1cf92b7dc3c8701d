"""Stopping an SDK call that runs on the caller's own thread.

A stop (``abort`` set by ``Engine.handle_stop``) must land within ~50 ms even while the SDK sits
in a blocking read of a silent socket, and a stream that only ever sends keep-alives must still
count as stalled. Python cannot interrupt a thread, so the call used to run on a fresh daemon
thread per attempt, every event crossing back through a ``queue.Queue`` polled every 50 ms.
On a zero-latency model that cost about 0.7 ms a turn: a thread start, and a GIL hand-off per
event between two runnable threads.

Here the SDK iterates on the caller's thread and a stop interrupts its I/O instead:

- every connection of an SDK client's pool goes through :class:`_TrackedBackend`, whose streams
  record, for the duration of each blocking read, write or TLS handshake, which socket the
  calling thread waits on (only while that thread runs a ``retry.guarded`` call);
- one shared watcher thread for all calls checks, every ``POLL_SECONDS``, each call's ``abort``
  and stall deadline, and interrupts a call by ``shutdown(SHUT_RDWR)`` of that socket: unlike
  ``close()``, which leaves a ``recv`` in another thread blocked, a shutdown wakes it at once
  (the read returns EOF, the SDK raises a connection error, the attempt ends). The shutdown
  happens under the call's lock, so the socket cannot have gone back to the pool meanwhile, and
  once interrupted every further I/O of the call fails at once;
- a new connection (DNS lookup and TCP connect, which expose no socket to shut down while they
  block) is made on a short-lived helper thread that the caller waits for in ``POLL_SECONDS``
  steps; connections are pooled, so that costs one thread per new connection, not per call
  (the Anthropic provider reads each response to its end so its connection is reused; the
  OpenAI SDK stops at ``[DONE]``, so there every call still opens one).

Measured (in-process turns as in ``bench/provider_overhead.py``, the three variants interleaved in
one process against the zero-latency fake; bare SDK call 1.77 ms p50):

- thread per attempt + queue (the old relay): 4.17 ms a turn;
- a reused worker thread with batched hand-off (a pool thread iterates, the caller drains a
  deque under one condition): 2.99 ms;
- this module: 2.86 ms. The two-hop hand-off costs the pool variant ~0.14 ms a turn, and a stop
  there still leaves a thread stuck in a read until its timeout.

Both of the last two also read the end of a finished answer so the connection is reused (see
``anthropic._read_to_end``), worth ~0.45 ms of the gap to the old relay. When the tracking cannot
be put in place (an SDK whose HTTP client is not laid out as expected), :func:`retry.relay` is
still used, and a warning says so.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import httpcore2
import httpx2

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
# The watcher keeps ticking this long after the last call ended, so back-to-back calls do not
# each have to wake it.
LINGER_SECONDS = 2.0

T = TypeVar("T")


class Interrupted(Exception):
    """Raised inside a call's I/O once the watcher has interrupted the call."""


class Watch:
    """One guarded call: its abort flag, stall deadline and the socket it is blocked on."""

    __slots__ = ("_lock", "_stream", "abort", "cut", "deadline", "limit")

    def __init__(self, abort: threading.Event, limit: float) -> None:
        self.abort = abort
        self.limit = limit
        self.deadline = time.monotonic() + limit
        self.cut: str | None = None  # "abort" or "stall" once interrupted
        self._lock = threading.Lock()
        self._stream: httpcore2.NetworkStream | None = None

    def touch(self) -> None:
        """The call waits for the server again: the stall clock starts again."""
        self.deadline = time.monotonic() + self.limit

    def pause(self) -> None:
        """The caller has an item and takes its time with it: that is no stall."""
        self.deadline = math.inf

    def enter(self, stream: httpcore2.NetworkStream) -> None:
        with self._lock:
            if self.cut is not None:
                raise Interrupted(self.cut)
            self._stream = stream

    def leave(self) -> None:
        with self._lock:
            self._stream = None

    def interrupt(self, why: str) -> None:
        with self._lock:
            if self.cut is not None:
                return
            self.cut = why
            if self._stream is not None:
                _shut_down(self._stream)


def _shut_down(stream: httpcore2.NetworkStream) -> None:
    sock = stream.get_extra_info("socket")
    if isinstance(sock, socket.socket):
        # The base class's shutdown: an SSLSocket's own would unwrap TLS under a reading thread.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


_local = threading.local()


def _current() -> Watch | None:
    watch: Watch | None = getattr(_local, "watch", None)
    return watch


def enter_thread(watch: Watch | None) -> Watch | None:
    """Make ``watch`` the calling thread's guarded call; returns the one to put back after
    (plain calls, not a context manager: this runs around every event of a stream)."""
    previous = _current()
    _local.watch = watch
    return previous


@contextlib.contextmanager
def watching(watch: Watch) -> Iterator[None]:
    """Make ``watch`` the calling thread's guarded call while the block runs."""
    previous = enter_thread(watch)
    try:
        yield
    finally:
        enter_thread(previous)


class _Watcher:
    """The one thread that checks every guarded call's abort flag and stall deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._idle = True  # waiting without a timeout: a new call must wake it
        self._started = False

    def add(self, watch: Watch) -> None:
        with self._cond:
            self._watches.add(watch)
            if not self._started:
                thread = threading.Thread(target=self._run, name="iris-provider-watch", daemon=True)
                thread.start()  # may raise (no thread left): the next call tries again
                self._started = True
            elif self._idle:
                self._cond.notify()

    def remove(self, watch: Watch) -> None:
        with self._cond:
            self._watches.discard(watch)

    def _run(self) -> None:
        quiet_since = time.monotonic()
        while True:
            with self._cond:
                if not self._watches and time.monotonic() - quiet_since > LINGER_SECONDS:
                    self._idle = True
                    while not self._watches:
                        self._cond.wait()
                    self._idle = False
                watches = list(self._watches)
            now = time.monotonic()
            if watches:
                quiet_since = now
            for watch in watches:
                try:
                    if watch.abort.is_set():
                        watch.interrupt("abort")
                    elif now > watch.deadline:
                        watch.interrupt("stall")
                except Exception:  # this thread must outlive any one call's failure
                    log.exception("could not interrupt a provider call")
            time.sleep(POLL_SECONDS)


_watcher = _Watcher()


def _reset_after_fork() -> None:
    global _watcher
    _watcher = _Watcher()  # the parent's watcher thread does not exist in a forked child


os.register_at_fork(after_in_child=_reset_after_fork)


def watch_call(abort: threading.Event, limit: float) -> Watch:
    """A new call, watched until :func:`unwatch`."""
    watch = Watch(abort, limit)
    _watcher.add(watch)
    return watch


def unwatch(watch: Watch) -> None:
    _watcher.remove(watch)


# -- the tracked network layer ------------------------------------------------------------------


def _io_error(kind: type[Exception], call: Callable[[], T], stream: httpcore2.NetworkStream) -> T:
    """Run blocking I/O on ``stream`` as the current call's (if any); an interrupted call's I/O
    fails as ``kind``, the error the SDK already handles for a broken connection."""
    watch = _current()
    if watch is None:
        return call()
    try:
        watch.enter(stream)
    except Interrupted as exc:
        raise kind(f"interrupted ({exc})") from None
    try:
        return call()
    finally:
        watch.leave()


class _TrackedStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        inner = self._inner
        return _io_error(httpcore2.ReadError, lambda: inner.read(max_bytes, timeout), inner)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        inner = self._inner
        _io_error(httpcore2.WriteError, lambda: inner.write(buffer, timeout), inner)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        inner = self._inner
        upgraded = _io_error(
            httpcore2.ConnectError,
            lambda: inner.start_tls(ssl_context, server_hostname, timeout),
            inner,
        )
        return _TrackedStream(upgraded)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _TrackedBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        connect = functools.partial(
            self._inner.connect_tcp, host, port, timeout, local_address, socket_options
        )
        return _TrackedStream(_connect(connect))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        connect = functools.partial(self._inner.connect_unix_socket, path, timeout, socket_options)
        return _TrackedStream(_connect(connect))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _connect(connect: Callable[[], httpcore2.NetworkStream]) -> httpcore2.NetworkStream:
    """Connect; a guarded call connects on a helper thread so that a stop need not wait for a
    silent host (a connect exposes no socket to shut down while it blocks)."""
    watch = _current()
    if watch is None:
        return connect()
    done = threading.Event()
    box: list[httpcore2.NetworkStream | BaseException] = []
    abandoned = False
    lock = threading.Lock()

    def work() -> None:
        try:
            result: httpcore2.NetworkStream | BaseException = connect()
        except BaseException as exc:  # handed to the caller, which raises it
            result = exc
        with lock:
            box.append(result)
            if abandoned and isinstance(result, httpcore2.NetworkStream):
                result.close()
        done.set()

    threading.Thread(target=work, name="iris-provider-connect", daemon=True).start()
    while not done.wait(POLL_SECONDS):
        if watch.cut is not None:
            with lock:
                if not box:
                    abandoned = True
                    raise httpcore2.ConnectError(f"interrupted ({watch.cut})")
            break
    result = box[0]
    if isinstance(result, BaseException):
        raise result
    return result


def track(client: object) -> bool:
    """Route every connection of an SDK client's HTTP pools through the tracked backend.
    False (nothing changed) when the client is not laid out as expected."""
    http = getattr(client, "_client", None)
    if not isinstance(http, httpx2.Client):
        return False
    transports = [getattr(http, "_transport", None), *getattr(http, "_mounts", {}).values()]
    pools = [getattr(t, "_pool", None) for t in transports if t is not None]
    if not pools or not all(
        isinstance(getattr(p, "_network_backend", None), httpcore2.NetworkBackend) for p in pools
    ):
        return False
    for pool in pools:
        pool._network_backend = _TrackedBackend(pool._network_backend)  # type: ignore[union-attr]
    return True


def within(seconds: float) -> bool:
    """Give the thread's guarded call at most ``seconds`` more before it counts as stalled.
    False when the thread runs no guarded call: then nothing bounds a wait."""
    watch = _current()
    if watch is None:
        return False
    watch.deadline = min(watch.deadline, time.monotonic() + seconds)
    return True

"""The one asyncio event loop the ACP SDK runs on, in a thread of its own.

The rest of Iris is threaded (gunicorn's gthread workers, the engine's lanes); the official ACP
SDK is asyncio. Rather than mix the two, every ACP coroutine runs on this loop and the engine's
threads wait on :class:`concurrent.futures.Future` objects, which they can poll for Stop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started on first use (an Iris with no ACP agent starts none)."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is stopped")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(loop, ready), name=self._name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from this (non-loop) thread."""
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._closed = True
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()

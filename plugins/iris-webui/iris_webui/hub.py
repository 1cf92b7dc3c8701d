"""Open browser sockets, by channel, and the loop that serves one.

Frames for a socket come from many threads (a run's lane thread, the API, other tabs' sockets),
but only the socket's own request thread writes to it: a frame is queued and that thread is
woken. So a browser that stops reading holds up nothing but its own socket (past
``MAX_PENDING`` queued frames it is closed), and writes never interleave.

simple-websocket reads on a thread of its own and signals an arrival (or the connection closing)
on its ``event``; :class:`WakeEvent` is that event, and wakes the same loop. One loop therefore
waits for both directions without polling, and a socket costs two threads: the request's and the
reader's.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Frame = dict[str, Any]
MAX_PENDING = 2000  # frames queued for one socket before it counts as dead
GOING_AWAY = 1001
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009


class WakeEvent(threading.Event):
    """simple-websocket's arrival signal (its ``event_class``), which also wakes our loop."""

    def __init__(self) -> None:
        super().__init__()
        self.on_set: Callable[[], None] | None = None

    def set(self) -> None:
        super().set()
        callback = self.on_set
        if callback is not None:
            callback()


class ReaderThread(threading.Thread):
    """simple-websocket's reader (its ``thread_class``), as a daemon: it blocks in ``recv`` on
    a socket gunicorn may already have closed, and must not keep a stopping worker alive until
    the master kills it at the end of the grace period."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["daemon"] = True
        super().__init__(*args, **kwargs)


class Client:
    """One open browser socket on one channel."""

    def __init__(self, ws: Any, channel: str, agent: str | None, login: str = "") -> None:
        self.ws = ws
        self.channel = channel
        self.agent = agent
        self.login = login  # the digest of the session that opened it (signing out closes it)
        self.accepts_messages = True  # False after an unknown ?agent=
        self._cond = threading.Condition()
        self._pending: deque[str] = deque()
        self._woken = False
        self._closing: tuple[int, str] | None = None

    def send(self, frame: Frame) -> None:
        text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from somewhere: escaped, it still goes
            text = json.dumps(frame, separators=(",", ":"))
        with self._cond:
            if self._closing is not None:
                return
            if len(self._pending) >= MAX_PENDING:
                log.warning("a Web UI socket on %s stopped reading; closing it", self.channel)
                self._pending.clear()
                self._closing = (POLICY_VIOLATION, "too slow")
            else:
                self._pending.append(text)
            self._cond.notify()

    def close(self, code: int, reason: str) -> None:
        """Close after the frames already queued have gone out."""
        with self._cond:
            if self._closing is None:
                self._closing = (code, reason)
            self._cond.notify()

    def _wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def serve(self, on_text: Callable[[Client, Any], None]) -> None:
        """Run on the request's thread until the socket closes (either side)."""
        from simple_websocket import ConnectionClosed  # type: ignore[import-untyped]

        event = self.ws.event
        if isinstance(event, WakeEvent):
            event.on_set = self._wake
        else:  # not our event class: fall back to waking on every frame we send only
            log.warning("simple-websocket event is not a WakeEvent; inbound frames may lag")
        self._wake()  # anything that arrived before the hook was set
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._woken and self._closing is None:
                        self._cond.wait()
                    out = list(self._pending)
                    self._pending.clear()
                    self._woken = False
                    closing = self._closing
                for text in out:
                    self.ws.send(text)
                if closing is not None:
                    self.ws.close(reason=closing[0], message=closing[1])
                    return
                while True:
                    data = self.ws.receive(timeout=0)  # raises ConnectionClosed once closed
                    if data is None:
                        break
                    on_text(self, data)
        except ConnectionClosed:
            return
        finally:
            with self._cond:
                self._closing = self._closing or (GOING_AWAY, "")
                self._pending.clear()


class Hub:
    """Every open socket, by channel; broadcasting never blocks on a socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_channel: dict[str, set[Client]] = {}
        self._closed = False

    def add(self, client: Client) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._by_channel.setdefault(client.channel, set()).add(client)
            return True

    def remove(self, client: Client) -> None:
        with self._lock:
            clients = self._by_channel.get(client.channel)
            if clients is not None:
                clients.discard(client)
                if not clients:
                    del self._by_channel[client.channel]

    def broadcast(self, channel: str, frame: Frame) -> int:
        with self._lock:
            clients = list(self._by_channel.get(channel, ()))
        for client in clients:
            client.send(frame)
        return len(clients)

    def close_login(
        self, login: str, code: int = POLICY_VIOLATION, reason: str = "signed out"
    ) -> int:
        """Close every socket a session opened (it signed out)."""
        with self._lock:
            theirs = [c for cs in self._by_channel.values() for c in cs if c.login == login]
        for client in theirs:
            client.close(code, reason)
        return len(theirs)

    def close_all(self, code: int = GOING_AWAY, reason: str = "Iris is restarting") -> None:
        with self._lock:
            self._closed = True
            everyone = [c for clients in self._by_channel.values() for c in clients]
        for client in everyone:
            client.close(code, reason)

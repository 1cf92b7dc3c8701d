"""gunicorn's gthread worker, changed where a server that holds many connections needs it.

gunicorn's own worker gives its threads to connections that have nothing to say and closes
connections on the loop that accepts and dispatches. With a thousand held streams and a small
reserve of threads for short requests (see :mod:`iris_runtime.web.capacity`), that is how a few
idle or rude clients would stop ``/health``:

1. **First bytes in the poller.** A new connection waits in the main poller until its request
   starts to arrive, never in a pool thread (gunicorn waits up to 5 s there): browser preconnects
   and port scans cost no thread. One that sends nothing for :data:`FIRST_BYTES_SECONDS` is
   closed.
2. **Closing off the loop.** A connection that is not kept alive is half-closed at once and then
   lingers (for the peer's FIN, at most 2 s) on a closer thread: gunicorn 27 lingers on its main
   loop, so ten clients that never close delayed every request by 20 s, and thirty killed the
   worker at its timeout.
3. **TLS per connection.** gunicorn wraps every listener or none; Iris wraps the connections
   of the ports bound off loopback (``Settings.tls_ports``: a sub-agent's bridge, an API that
   other hosts reach) that arrived on an address other than loopback, so the host's own agents,
   health checks and tools keep plain HTTP on loopback even when the API listens on ``0.0.0.0``.
4. **No blocking forever.** Each socket gets ``IRIS_IO_TIMEOUT_SECONDS``: a client that stops
   sending its request or stops reading its response frees its thread (and its slot) when no
   byte has moved for that long; ``TCP_USER_TIMEOUT`` does the same for a peer that vanished.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

from iris_runtime.tls import is_loopback, server_context

log = logging.getLogger(__name__)

FIRST_BYTES_SECONDS = 5.0
LINGER_SECONDS = 2.0  # as gunicorn's own graceful close
LINGER_DRAIN_BYTES = 65536
DEFAULT_IO_TIMEOUT = 30.0
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_TRANSIENT = (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK)


class TimedConn(TConn):  # type: ignore[misc]
    """A connection whose blocking I/O gives up after ``io_timeout`` seconds without progress,
    and whose graceful close lingers on ``closer`` rather than on the worker's main loop."""

    def __init__(
        self,
        cfg: Any,
        sock: socket.socket,
        client: Any,
        server: Any,
        *,
        io_timeout: float,
        closer: LingeringCloser,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(cfg, sock, client, server)
        self.sock: socket.socket = sock  # as gunicorn set it; declared for the type checker
        self.io_timeout = io_timeout
        self.closer = closer
        self.tls = tls
        if hasattr(socket, "TCP_USER_TIMEOUT") and sock.family != socket.AF_UNIX:
            # Unacknowledged data for this long means the peer is gone (no FIN, no RST).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(io_timeout * 2000))

    def init(self) -> None:
        if self.tls is not None and not self.initialized:
            # On a pool thread, bounded by the I/O timeout: a client that stalls the handshake
            # costs what one that stalls its request does. A failed handshake raises
            # ssl.SSLError: gunicorn's handler logs it at debug and answers with its (plain)
            # error page, which the TLS client discards; a stalled one raises TimeoutError,
            # which gunicorn logs as a socket error. Either way the connection is closed.
            self.sock.setblocking(True)
            self.sock.settimeout(self.io_timeout)
            self.sock = self.tls.wrap_socket(self.sock, server_side=True)
        # gunicorn makes the socket blocking (no timeout) before every request; bound it again.
        super().init()
        self.sock.settimeout(self.io_timeout)

    def close(self, graceful: bool = False) -> None:
        if graceful:
            self.closer.close(self.sock)
        else:
            super().close()


class LingeringCloser:
    """Half-closes sockets and lets them linger for the peer on one thread of its own."""

    def __init__(self) -> None:
        self._incoming: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        threading.Thread(target=self._run, name="iris-closer", daemon=True).start()

    def close(self, sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_WR)  # the response is complete: send FIN now
        except OSError:
            sock.close()
            return
        self._incoming.put(sock)
        with contextlib.suppress(BlockingIOError):  # a full pipe means it is awake already
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        deadlines: dict[socket.socket, tuple[float, int]] = {}
        while True:
            timeout = min((d for d, _ in deadlines.values()), default=None)
            wait = None if timeout is None else max(0.0, timeout - time.monotonic())
            for key, _ in selector.select(wait):
                if key.fileobj == self._wake_r:
                    os.read(self._wake_r, 4096)
                    self._adopt(selector, deadlines)
                else:
                    self._drain(key.fileobj, selector, deadlines)  # type: ignore[arg-type]
            now = time.monotonic()
            for sock in [s for s, (d, _) in deadlines.items() if d <= now]:
                self._finish(sock, selector, deadlines)

    def _adopt(self, selector: selectors.BaseSelector, deadlines: dict[Any, Any]) -> None:
        while True:
            try:
                sock = self._incoming.get_nowait()
            except queue.Empty:
                return
            try:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                sock.close()
                continue
            deadlines[sock] = (time.monotonic() + LINGER_SECONDS, 0)

    def _drain(
        self, sock: socket.socket, selector: selectors.BaseSelector, deadlines: dict[Any, Any]
    ) -> None:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        deadline, drained = deadlines[sock]
        if not data or drained + len(data) >= LINGER_DRAIN_BYTES:
            self._finish(sock, selector, deadlines)
        else:
            deadlines[sock] = (deadline, drained + len(data))

    @staticmethod
    def _finish(
        sock: socket.socket, selector: selectors.BaseSelector, deadlines: dict[Any, Any]
    ) -> None:
        deadlines.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()


class IrisWorker(ThreadWorker):  # type: ignore[misc]
    """``worker_class`` of ``iris serve``: gthread with the three changes above."""

    def init_process(self) -> None:
        self.closer = LingeringCloser()
        self._out_of_files_logged = 0.0
        super().init_process()

    @functools.cached_property
    def tls_by_port(self) -> dict[int, ssl.SSLContext]:
        """One server context for the app's ``tls_ports`` (built once, after the app loaded)."""
        settings = getattr(getattr(self.wsgi, "runtime", None), "settings", None)
        if settings is None:
            # Fail closed: serving plain HTTP where TLS was configured would leak tokens.
            raise RuntimeError("the app has no settings: cannot tell which ports speak TLS")
        if not settings.tls_ports:
            return {}
        context = server_context(settings.tls_cert, settings.tls_key)
        return dict.fromkeys(settings.tls_ports, context)

    @functools.cached_property
    def io_timeout(self) -> float:
        """The app's ``IRIS_IO_TIMEOUT_SECONDS`` (read once: the app is loaded before accepting)."""
        settings = getattr(getattr(self.wsgi, "runtime", None), "settings", None)
        return float(settings.io_timeout_seconds) if settings else DEFAULT_IO_TIMEOUT

    def accept(self, listener: socket.socket) -> None:
        try:
            sock, client = listener.accept()
        except OSError as exc:
            self._accept_failed(exc)
            return
        self.nr_conns += 1
        conn = TimedConn(
            self.cfg,
            sock,
            client,
            listener.getsockname(),
            io_timeout=self.io_timeout,
            closer=self.closer,
            tls=self._tls_for(listener, sock),
        )
        conn.timeout = time.monotonic() + FIRST_BYTES_SECONDS
        self.pending_conns.append(conn)
        self.poller.register(
            sock, selectors.EVENT_READ, functools.partial(self.on_pending_socket_readable, conn)
        )

    def _tls_for(self, listener: socket.socket, sock: socket.socket) -> ssl.SSLContext | None:
        """The TLS context for a connection just accepted: its listener's, unless it arrived on
        a loopback address (a wildcard listener serves loopback too)."""
        context = self.tls_by_port.get(listener.getsockname()[1])
        if context is None or sock.family == socket.AF_UNIX:
            return context
        try:
            local = sock.getsockname()[0]
        except OSError:
            return context
        return None if is_loopback(str(local)) else context

    def _accept_failed(self, exc: OSError) -> None:
        if exc.errno in _TRANSIENT:
            return
        if exc.errno not in _OUT_OF_FILES:
            raise exc
        # Out of descriptors: keep serving what is open rather than let the worker die.
        now = time.monotonic()
        if now - self._out_of_files_logged > 10:
            self._out_of_files_logged = now
            log.error("cannot accept connections: %s (raise LimitNOFILE)", exc.strerror)
        time.sleep(0.05)

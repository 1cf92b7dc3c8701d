"""The reach socket: a unix socket where agents on this machine reply to turns and speak first.

One JSON object per line each way, any number of requests per connection. The socket carries no
credential of its own (spec 004: being on the machine is the permission), so who may connect is
decided by the file's permissions: 0600 for Iris's user, or 0660 with ``IRIS_REACH_GROUP`` for
the agents' group. Its mode is set before it listens, so there is no moment it is open wider.

A malformed, oversized or unanswerable line gets an error line; nothing a peer sends can stop
the listener.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import json
import logging
import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

from iris_runtime.custom_agents.reach_ops import handle
from iris_runtime.custom_agents.service import CustomAgents
from iris_runtime.errors import ConfigError
from iris_runtime.private_files import private_dir

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1024 * 1024
MAX_CONNECTIONS = 128
IDLE_SECONDS = 600.0  # a connection silent this long is closed (its agent reconnects)
OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
BACKOFF_SECONDS = 0.5  # how long accepting pauses when the process is out of descriptors
NOT_UNICODE = "every string must be valid Unicode (a lone surrogate cannot be sent)"


class ReachServer:
    def __init__(
        self, agents: CustomAgents, path: Path, group: str | None, idle: float = IDLE_SECONDS
    ) -> None:
        self._agents = agents
        self.path = path
        self._group = group
        # Never shorter than the silence a turn is allowed: an agent quiet but within its rights
        # keeps its connection.
        self._idle = max(idle, IDLE_SECONDS)
        self._sock: socket.socket | None = None
        self._open = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stopping = threading.Event()

    def start(self) -> None:
        if not self.path.parent.exists():
            private_dir(self.path.parent)  # 0700; for a group, make the folder yourself (docs)
        _remove_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.fspath(self.path))
            self._restrict()
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        threading.Thread(target=self._accept, name="reach socket", daemon=True).start()
        log.info("reach socket listening on %s", self.path)

    def _restrict(self) -> None:
        if self._group is None:
            os.chmod(self.path, 0o600)
            return
        try:
            gid = grp.getgrnam(self._group).gr_gid
        except KeyError:
            raise ConfigError(f"IRIS_REACH_GROUP names no group: {self._group!r}") from None
        os.chown(self.path, -1, gid)
        os.chmod(self.path, 0o660)

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError as exc:
                if self._stopping.is_set():
                    return
                if exc.errno in OUT_OF_FDS:
                    # Out of descriptors: retrying at once would spin and flood the log; the
                    # waiting callers stay queued until some are freed.
                    log.warning("the reach socket cannot accept (%s); pausing", exc.strerror)
                    self._stopping.wait(BACKOFF_SECONDS)
                else:
                    log.exception("the reach socket failed to accept; still listening")
                continue
            if not self._open.acquire(blocking=False):
                with contextlib.suppress(OSError):  # a caller already gone is no matter
                    conn.settimeout(1.0)
                    _send(conn, {"error": "too many connections"})
                conn.close()
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # no thread to be had: refuse this caller, keep listening
                log.warning("the reach socket cannot start a thread for a caller")
                self._open.release()
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self._idle)
            with conn, conn.makefile("rb") as lines:
                while not self._stopping.is_set():
                    line = lines.readline(MAX_LINE_BYTES + 1)
                    if not line:
                        return
                    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                        _send(conn, {"error": f"line too long (at most {MAX_LINE_BYTES} bytes)"})
                        _skip_rest(lines)
                        continue
                    if line.strip():
                        _send(conn, self._answer(line))
        except OSError:
            return  # the peer went away or idled out; nothing to answer
        finally:
            self._open.release()

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return {"error": "not valid JSON: send one JSON object per line"}
        if not _encodable(request):
            # A lone surrogate (``"\\ud800"``) is valid JSON but no UTF-8: it could be neither
            # answered, nor logged, nor shown.
            return {"error": NOT_UNICODE}
        try:
            return handle(self._agents, request)
        except Exception:
            log.exception("the reach socket failed on a request")
            return {"error": "internal error: see Iris's log"}


def _send(conn: socket.socket, reply: dict[str, Any]) -> None:
    data = json.dumps(reply, ensure_ascii=False).encode(errors="replace")
    conn.sendall(data + b"\n")


def _encodable(request: Any) -> bool:
    try:
        json.dumps(request, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _skip_rest(lines: Any) -> None:
    """Drop the rest of an oversized line, so the next request starts clean."""
    while True:
        chunk = lines.readline(MAX_LINE_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return


def _remove_stale(path: Path) -> None:
    """A socket file left by an Iris that died is removed; a live one is not Iris's to take."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{path} exists and is not a socket; the reach socket cannot go there")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(os.fspath(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise ConfigError(f"another process is already listening on {path}")

"""Tools for the bridge fault tests: a proxy that cuts a stream, an old-style agent, hard kills
of a gunicorn process tree, and waiting helpers."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.agents.ports import can_bind
from iris_runtime.testing.server import IrisServer


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


class Background:
    """Run one call on a thread, keeping what it returned (``value``) or raised (``error``)."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._target = target
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self._target()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"background call still running after {timeout}s"


# -- a TCP proxy that cuts the first connection --------------------------------------------------


class CuttingProxy:
    """Forwards TCP to ``upstream``; the FIRST connection is closed (both sides) right after the
    response bytes carrying the first ``status`` line have been forwarded. Later connections (the
    client's polls of the job log) pass through untouched."""

    MARKER = b'"type":"status"'

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self.cut = threading.Event()
        self.forwarded_before_cut = b""
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._spawn(self._accept_loop)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                first = self.connections == 1
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, False)
            self._spawn(self._pump, upstream, client, first)

    def _pump(self, source: socket.socket, target: socket.socket, cut_after_status: bool) -> None:
        buffered = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if not cut_after_status:
                    target.sendall(data)
                    continue
                buffered += data
                at = buffered.find(self.MARKER)
                # The JSON line ends with "\n"; the chunk that carries it with "\r\n".
                end = buffered.find(b"\n\r\n", at) if at >= 0 else -1
                if end < 0:
                    target.sendall(data)
                    continue
                keep = end + 3 - (len(buffered) - len(data))
                target.sendall(data[:keep])
                self.forwarded_before_cut = buffered[: end + 3]
                self.cut.set()
                break
        except OSError:
            pass
        finally:
            for sock in (source, target):
                _close(sock)

    def close(self) -> None:
        self._closed.set()
        _close(self.listener)
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            _close(sock)
        for thread in threads:
            thread.join(5)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


# -- an old-style sub-agent ----------------------------------------------------------------------


class OldAgent(ThreadingHTTPServer):
    """A sub-agent from before the stream: it records what it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), OldAgentHandler)
        self.received: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class OldAgentHandler(BaseHTTPRequestHandler):
    """Ignores Accept: every POST /bridge gets one JSON body."""

    server: OldAgent

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/bridge":
            self.send_error(404)
            return
        self.server.received.append(
            {
                "body": body,
                "accept": self.headers.get("Accept"),
                "authorization": self.headers.get("Authorization"),
            }
        )
        payload = json.dumps({"text": "old reply"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return None


# -- helpers -------------------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc/*/stat (field 4 is the parent pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def kill_hard(server: IrisServer) -> None:
    """SIGKILL the gunicorn master and its worker(s), leaving nothing to finish gracefully.

    The workers are frozen (SIGSTOP) first: a worker that saw its master die before its own
    SIGKILL arrived would shut down gracefully ("Parent changed"), stopping the agents Iris
    supervises, which no crash does. The master is killed before them: killed after a worker,
    it could fork a replacement in between, and that orphan would keep serving the ports."""
    assert server.process is not None
    master = server.process.pid
    workers = children_of(master)
    assert workers, "gunicorn has no worker to kill"
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    os.kill(master, signal.SIGKILL)
    server.process.wait(10)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in workers:  # reparented, then reaped: gone once /proc forgets it or it is a zombie
        wait_for(functools.partial(_gone, pid), 10, f"worker {pid} to die")
    ports = [server.port]
    if "BRIDGE_PORT" in server.env:
        ports.append(int(server.env["BRIDGE_PORT"]))
    for port in ports:  # no orphan still holds them
        wait_for(functools.partial(can_bind, port), 10, f"port {port} to be free")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def log_entries(server: IrisServer, session: str) -> list[dict[str, Any]]:
    path = server.data_dir / f"SESSION-{session}" / "log.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line still being written
    return entries

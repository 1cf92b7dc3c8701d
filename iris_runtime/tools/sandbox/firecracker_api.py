"""A minimal client of Firecracker's HTTP API on its Unix socket (http.client over AF_UNIX)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import SandboxUnavailable


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


def wait_for_socket(path: Path, seconds: float, alive: Any) -> None:
    """Until the VMM accepts connections on ``path``; ``alive()`` False means it died first.

    The socket file appears when Firecracker binds, a moment before it listens: a connect in
    between is refused, so the file alone is not the signal (on a loaded host the gap is long
    enough to lose the race)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _accepts(path):
            return
        if not alive():
            raise SandboxUnavailable("firecracker exited before its API socket appeared")
        time.sleep(0.02)
    raise SandboxUnavailable(f"firecracker's API socket {path} did not appear in {seconds:g}s")


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)  # a full backlog blocks a connect: the deadline still counts
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError, BlockingIOError):
            return False
    return True


def call(path: Path, method: str, url: str, body: dict[str, Any], timeout: float = 10.0) -> None:
    """One API request; a non-2xx answer raises with Firecracker's fault message."""
    connection = _UnixConnection(path, timeout)
    try:
        payload = json.dumps(body)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        connection.request(method, url, body=payload, headers=headers)
        response = connection.getresponse()
        answer = response.read().decode("utf-8", errors="replace")
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        raise SandboxUnavailable(f"firecracker {method} {url}: {response.status} {answer[:300]}")

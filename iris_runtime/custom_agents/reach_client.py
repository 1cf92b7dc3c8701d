"""Talking to a reach socket from a script (``iris reach``, ``wireling``) or from Iris herself
when she answers as a relay agent for another host."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

TIMEOUT_SECONDS = 30.0


class ReachError(Exception):
    """The socket could not be reached, or answered with an error."""


class ReachConnection:
    """One connection, any number of requests, one after another."""

    def __init__(self, path: Path, timeout: float = TIMEOUT_SECONDS) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(os.fspath(path))
        except OSError as exc:
            self._sock.close()
            raise ReachError(f"cannot reach Iris at {path}: {exc.strerror or exc}") from None
        self._lines = self._sock.makefile("rb")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """The reply, whatever it says (``{"ok": …}`` or ``{"error": …}``)."""
        line = json.dumps({"op": op, **fields}, ensure_ascii=False).encode() + b"\n"
        try:
            self._sock.sendall(line)
            reply = self._lines.readline()
        except OSError as exc:
            raise ReachError(f"the reach socket at {self.path} failed: {exc}") from None
        if not reply:
            raise ReachError(f"the reach socket at {self.path} closed the connection")
        answer = json.loads(reply)
        if not isinstance(answer, dict):
            raise ReachError("the reach socket answered something that is not an object")
        return answer

    def close(self) -> None:
        self._lines.close()
        self._sock.close()

    def __enter__(self) -> ReachConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reach(path: Path, op: str, **fields: Any) -> dict[str, Any]:
    """One request on its own connection; :class:`ReachError` if the reply is an error."""
    with ReachConnection(path) as conn:
        answer = conn.request(op, **fields)
    if "error" in answer:
        raise ReachError(str(answer["error"]))
    return answer

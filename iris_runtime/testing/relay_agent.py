"""A relay agent for tests (spec 004's relay contract v1), standard library only.

Run it as ``python -m iris_runtime.testing.relay_agent PORT SOCKET RECORD``, or through
:class:`RelayAgent`, which starts it as a real process and reads what it recorded.

Every POST it receives, and the reply to every reach request it makes, is appended to RECORD
as one JSON line, so a test can assert what crossed the wire. What it does with a message is
chosen by the message's first word:

- ``echo TEXT``: ``You said: `` then TEXT, then done (two deltas);
- ``tools``: a read card (input, then output), a delta, done (``slowtools``: the same, paced);
- ``late``: a delta and done, then one more delta and a tool card after the end;
- ``hang``: nothing at all (for Stop and silence), then tries a delta when told to stop;
- ``refuse``: answers the POST with HTTP 500;
- ``note CHAT``: during its turn sends a note to CHAT (no chat: the turn's), then done;
- ``flood N SIZE``: N deltas of SIZE characters (``word word …``) each, then done.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

REACH = ""  # the reach socket's path and the record file, set by main()
RECORD = ""
_record_lock = threading.Lock()


@dataclass
class RelayAgent:
    """This module's agent as a real process, on ``port``, replying through ``socket_path``."""

    port: int
    socket_path: Path
    record: Path
    process: subprocess.Popen[bytes] | None = None

    def program(self) -> list[str]:
        """What runs the agent (a subclass that teaches it more words runs its own script)."""
        return [sys.executable, "-m", __name__]

    def start(self, timeout: float = 60.0) -> Self:
        argv = [*self.program(), str(self.port), str(self.socket_path)]
        self.process = subprocess.Popen([*argv, str(self.record)])
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"the relay agent did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def entries(self) -> list[dict[str, Any]]:
        """Everything recorded: ``{"post": …}`` per POST, ``{"op", "reply"}`` per request."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def posts(self, kind: str | None = None) -> list[dict[str, Any]]:
        posts = [e["post"] for e in self.entries() if "post" in e]
        return [p for p in posts if kind is None or p["type"] == kind]


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def record(entry: dict[str, Any]) -> None:
    with _record_lock, open(RECORD, "a") as file:
        file.write(json.dumps(entry) + "\n")


class Reach:
    """One connection carrying every request of a turn, as the contract allows."""

    def __init__(self) -> None:
        self.pause = 0.0  # seconds before each request
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(REACH)
        self.lines = self.sock.makefile("rb")

    def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        time.sleep(self.pause)
        self.sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        reply: dict[str, Any] = json.loads(self.lines.readline())
        record({"op": op, "turn_id": fields.get("turn_id"), "reply": reply})
        return reply

    def close(self) -> None:
        self.lines.close()
        self.sock.close()


def answer(msg: dict[str, Any]) -> None:
    word, _, rest = msg["text"].partition(" ")
    reach = Reach()
    try:
        _answer(reach, msg, word, rest)
    finally:
        reach.close()


def _answer(reach: Reach, msg: dict[str, Any], word: str, rest: str) -> None:
    turn = msg["turn_id"]
    if word == "echo":
        reach("turn.delta", turn_id=turn, text="You said: ")
        reach("turn.delta", turn_id=turn, text=rest)
        reach("turn.done", turn_id=turn)
    elif word in {"tools", "slowtools"}:
        if word == "slowtools":  # room for transports that edit a placeholder once a second
            reach.pause = 1.5
        card = {"id": "1", "kind": "read", "title": "report.pdf"}
        reach("turn.tool", turn_id=turn, **card, input={"file_path": "report.pdf"})
        reach("turn.tool", turn_id=turn, id="1", title="report.pdf", output="42 pages")
        reach("turn.delta", turn_id=turn, text="It argues three things.")
        reach("turn.done", turn_id=turn, extra="ignored")
    elif word == "late":
        reach("turn.delta", turn_id=turn, text="on time")
        reach("turn.done", turn_id=turn)
        reach("turn.delta", turn_id=turn, text="too late")
        reach("turn.tool", turn_id=turn, id="9", kind="read", title="late.txt")
    elif word == "note":
        reach("note", text="a note from inside", source="agent", chat=rest or msg["chat_id"])
        reach("turn.done", turn_id=turn)
    elif word == "flood":
        count, size = (int(n) for n in rest.split())
        line = json.dumps({"op": "turn.delta", "turn_id": turn, "text": ("word " * size)[:size]})
        for _ in range(count):  # not recorded: there may be thousands
            reach.sock.sendall(line.encode() + b"\n")
            reach.lines.readline()
        reach("turn.done", turn_id=turn)


class Inbound(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        record({"post": msg, "path": self.path, "content_type": self.headers["Content-Type"]})
        refuse = msg.get("type") == "message" and msg["text"].startswith("refuse")
        body = b"" if refuse else json.dumps({"session": f"s-{msg['chat_id']}", "x": 1}).encode()
        self.send_response(500 if refuse else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if msg["type"] == "message" and not msg["text"].startswith(("hang", "refuse")):
            threading.Thread(target=answer, args=(msg,), daemon=True).start()
        elif msg["type"] == "stop":  # whatever it still sends is refused
            reach = Reach()
            reach("turn.delta", turn_id=msg["turn_id"], text="after stop")
            reach.close()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    global REACH, RECORD
    port, REACH, RECORD = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ThreadingHTTPServer(("127.0.0.1", port), Inbound).serve_forever()


if __name__ == "__main__":
    main()

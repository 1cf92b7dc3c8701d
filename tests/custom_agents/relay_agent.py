"""A relay agent for the tests, standard library only: ``relay_agent.py PORT SOCKET RECORD``.

Every POST it receives, and the reply to every reach request it makes, is appended to RECORD
as one JSON line, so a test can assert what crossed the wire. What it does with a message is
chosen by the message's first word:

- ``echo TEXT``: ``You said: `` then TEXT, then done (two deltas);
- ``tools``: a read card (input, then output), a delta, done;
- ``late``: a delta and done, then one more delta and a tool card after the end;
- ``hang``: nothing at all (for Stop and silence), then tries a delta when told to stop;
- ``refuse``: answers the POST with HTTP 500;
- ``note CHAT``: during its turn sends a note to CHAT (no chat: the turn's), then done.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORT, REACH, RECORD = int(sys.argv[1]), sys.argv[2], sys.argv[3]
_record_lock = threading.Lock()


def record(entry: dict[str, Any]) -> None:
    with _record_lock, open(RECORD, "a") as file:
        file.write(json.dumps(entry) + "\n")


class Reach:
    """One connection carrying every request of a turn, as the contract allows."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(REACH)
        self.lines = self.sock.makefile("rb")

    def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        self.sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        reply: dict[str, Any] = json.loads(self.lines.readline())
        record({"op": op, "turn_id": fields.get("turn_id"), "reply": reply})
        return reply


def answer(msg: dict[str, Any]) -> None:
    turn, text = msg["turn_id"], msg["text"]
    word, _, rest = text.partition(" ")
    reach = Reach()
    if word == "echo":
        reach("turn.delta", turn_id=turn, text="You said: ")
        reach("turn.delta", turn_id=turn, text=rest)
        reach("turn.done", turn_id=turn)
    elif word == "tools":
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

    def log_message(self, *args: Any) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Inbound).serve_forever()

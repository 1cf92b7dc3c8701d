#!/usr/bin/env python3
import json, os, socket, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REACH = os.environ.get("WIRELING_REACH_SOCK", "/run/wireling-reach.sock")

def reach(op, **fields):
    """One request line out, one reply line back."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(REACH)
        s.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        return json.loads(s.makefile().readline())

def answer(msg):
    turn = msg["turn_id"]
    reach("turn.delta", turn_id=turn, text="You said: ")
    reach("turn.delta", turn_id=turn, text=msg["text"])
    reach("turn.done", turn_id=turn)

class Inbound(BaseHTTPRequestHandler):
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if msg["type"] == "message":
            threading.Thread(target=answer, args=(msg,), daemon=True).start()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", 8700), Inbound).serve_forever()

"""A one-delta relay turn through the session API, against a bare gunicorn echo; and the reach
socket's requests per second, against a bare unix-socket line echo.

Iris (``iris serve``, offline provider, never called) hosts one custom relay agent: a small
standard-library service (below) that accepts each POST at once and, from a thread, sends one
``turn.delta`` (``ok``) and ``turn.done`` on Iris's reach socket. N concurrent clients (default
4), each on its own session, post ``@relay ping`` to ``POST /sessions/<id>/message`` back to back
and check the reply is ``ok``. The baseline is the bare echo app under gunicorn gthread with the
same client load. Phases alternate echo, relay, relay, echo after a warm-up.

The reach socket is measured with the unlimited ``chats`` op: C connections (default 4), each
sending one request and reading its reply, back to back. The baseline is a unix-socket server in
this process that answers every line with ``{"ok": true}``, one thread per connection, like the
reach socket.

Figures: ``relay_p50_ms``, ``relay_p99_ms`` (ratio to the echo), ``reach_requests_per_s`` (ratio
to the bare socket).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit, emit_percentiles
from _load import LoadResult, Request, drive_clients, report_loads
from _servers import free_port, running, running_iris, temp_workdir

BENCH = "relay_round_trip"

AGENT = """
import json, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, REACH = int(sys.argv[1]), sys.argv[2]


def reply(turn):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(REACH)
        lines = s.makefile("rb")
        for op in ({"op": "turn.delta", "turn_id": turn, "text": "ok"},
                   {"op": "turn.done", "turn_id": turn}):
            s.sendall((json.dumps(op) + "\\n").encode())
            lines.readline()


class Inbound(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if msg.get("type") == "message":
            threading.Thread(target=reply, args=(msg["turn_id"],), daemon=True).start()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Inbound).serve_forever()
"""


def turn_load(url: str, token: str, *, clients: int, seconds: float, tag: str) -> LoadResult:
    def request_for(index: int) -> Request:
        def one(http: requests.Session) -> tuple[float, str | None]:
            start = time.perf_counter()
            response = http.post(
                f"{url}/sessions/{tag}-{index}/message",
                json={"text": "@relay ping"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            elapsed = (time.perf_counter() - start) * 1000.0
            if response.status_code != 200 or response.json().get("text") != "ok":
                return elapsed, f"HTTP {response.status_code}: {response.text[:200]}"
            return elapsed, None

        return one

    return drive_clients(request_for, clients=clients, seconds=seconds, name=f"relay-{tag}")


def echo_load(url: str, *, clients: int, seconds: float) -> LoadResult:
    body = {"text": "@relay ping"}

    def request_for(index: int) -> Request:
        def one(http: requests.Session) -> tuple[float, str | None]:
            start = time.perf_counter()
            response = http.post(f"{url}/message", json=body, timeout=60)
            ok = response.status_code == 200 and response.json().get("echo") == body
            elapsed = (time.perf_counter() - start) * 1000.0
            return elapsed, None if ok else f"HTTP {response.status_code}"

        return one

    return drive_clients(request_for, clients=clients, seconds=seconds, name="echo")


def socket_rate(path: Path, *, connections: int, seconds: float) -> float:
    """Requests per second of ``chats`` over ``connections`` connections, back to back."""
    counts = [0] * connections
    deadline = time.perf_counter() + seconds

    def client(index: int) -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(path))
            lines = sock.makefile("rb")
            while time.perf_counter() < deadline:
                sock.sendall(b'{"op": "chats"}\n')
                if b'"ok": true' not in lines.readline():
                    raise RuntimeError("the socket answered an error")
                counts[index] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


class BareSocket:
    """The baseline: a unix socket answering each line with ``{"ok": true}``."""

    def __init__(self, path: Path) -> None:
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(path))
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                json.loads(line)
                conn.sendall(json.dumps({"ok": True, "chats": []}).encode() + b"\n")

    def close(self) -> None:
        self._sock.close()


def reach_rates(bare_path: Path, reach: Path, args: argparse.Namespace) -> tuple[float, float]:
    """(the bare socket's requests per second, the reach socket's), one after the other."""
    bare = BareSocket(bare_path)
    try:
        bare_rate = socket_rate(bare_path, connections=args.clients, seconds=args.seconds / 2)
    finally:
        bare.close()
    return bare_rate, socket_rate(reach, connections=args.clients, seconds=args.seconds / 2)


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=6.0)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients [4]")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds [1.0]")
    args = parser.parse_args()
    relay, echo = LoadResult(), LoadResult()
    with temp_workdir() as workdir:
        reach = workdir / "reach.sock"
        agent_port = free_port()
        agents_d = workdir / "agents.d"
        agents_d.mkdir()
        manifest = {"kind": "relay", "label": "Relay", "relay": f"http://127.0.0.1:{agent_port}/"}
        (agents_d / "relay.json").write_text(json.dumps(manifest))
        (workdir / "agent.py").write_text(AGENT)
        agent = subprocess.Popen(
            [sys.executable, str(workdir / "agent.py"), str(agent_port), str(reach)]
        )
        env = {"IRIS_REACH_SOCKET": str(reach), "IRIS_CUSTOM_AGENTS_DIR": str(agents_d)}
        try:
            with (
                running_iris(workdir / "iris", extra_env=env) as iris,
                running("echo", workdir) as baseline,
            ):
                turn_load(
                    iris.base_url, iris.token, clients=args.clients, seconds=args.warmup, tag="w"
                )
                echo_load(baseline.base_url, clients=args.clients, seconds=args.warmup)
                for phase, kind in enumerate(("echo", "relay", "relay", "echo")):
                    if kind == "echo":
                        echo.add(
                            echo_load(
                                baseline.base_url, clients=args.clients, seconds=args.seconds / 2
                            )
                        )
                    else:
                        relay.add(
                            turn_load(
                                iris.base_url,
                                iris.token,
                                clients=args.clients,
                                seconds=args.seconds / 2,
                                tag=f"p{phase}",
                            )
                        )
                bare_rate, reach_rate = reach_rates(workdir / "bare.sock", reach, args)
        finally:
            agent.terminate()
            agent.wait(10)
    if report_loads({"relay": relay, "echo": echo}):
        return 1
    emit_percentiles(BENCH, "relay", relay.latencies_ms, echo.latencies_ms)
    emit(BENCH, "reach_requests_per_s", reach_rate, "req/s", bare_rate)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

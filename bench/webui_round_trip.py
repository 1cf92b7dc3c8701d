"""Web UI WebSocket round trip and 200 open browser sessions, against a bare flask-sock echo.

Iris runs ``iris serve`` with ``IRIS_WEBUI_PORT`` set and the ``offline`` provider (no model, a
fixed reply), so the figures are the transport's and the engine's overhead. The client logs in
like a browser: it exchanges the one-time key that ``iris serve`` prints on stderr
(``/login?key=...``; ``IRIS_WEBUI_PASSWORD`` through ``POST /login`` if no key is found) for the
``iris_webui`` cookie, creates conversations with ``POST /api/sessions`` and opens
``/ws?session=<id>`` with that cookie and the UI's own ``Origin`` (websocket-client).

The baseline is a bare flask-sock echo app (a ``/ws`` route that sends every frame back) under
gunicorn gthread, one worker, configured like Iris (same thread count, keep-alive 5 s); its
client sends one frame and waits for the echo.

Figures:

* ``round_trip_p50_ms``, ``round_trip_p99_ms``: one logged-in socket sends
  ``{"type": "message", "text": ...}`` and waits for the ``reply`` frame with ``final: true``;
  ``--messages`` (default 1000) split over the phases echo, iris, ping, ping, iris, echo after a
  warm-up, default ``IRIS_THREADS`` (32) on both. Baseline: the echo's frame round trip.
* ``ping_p50_ms``, ``ping_p99_ms``: ``{"type": "ping"}`` until ``pong`` on the same Iris socket
  (the Web UI transport alone, no engine turn); same baseline and message count.
* 200 held sessions (``--sessions``), each its own conversation and socket, all open at once
  (``IRIS_THREADS`` = ``--hold-threads``, default 256, on both servers): every socket gets its
  ``ready`` frame, then all send one message together and wait for their final reply while the
  others stay open. ``hold_served`` (baseline: sessions started) and ``hold_errors`` (baseline 0;
  any error fails the bench); ``hold_all_replied_s`` from the send signal to the last reply;
  ``hold_idle_rss_mb`` (master + worker VmRSS before the sockets open, after a warm-up) and
  ``hold_rss_mb`` (peak while all are open, sampled every 50 ms) with the echo's as baselines;
  ``hold_rss_per_session_kb`` = (peak - idle) / sessions.
* Many open tabs against the server's limits: see ``held_streams`` (Web UI sockets take stream
  slots, ``IRIS_MAX_STREAMS``, not ``IRIS_THREADS``).

Target: none fixed; the round-trip ratio is reported, the hold phase must serve every session.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import requests
import websocket  # websocket-client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    HOST,
    Server,
    add_common_args,
    emit,
    free_port,
    handle_sigterm,
    log_tail,
    percentile,
    ratio,
    run_main,
    start_echo,
    start_iris,
    stop_process,
    temp_workdir,
    wait_healthy,
)
from cold_start import descendants, rss_mb

BENCH = "webui_round_trip"
COOKIE = "iris_webui"
PASSWORD = "bench-webui-password"  # a throwaway for a temporary server, passed by environment
KEY_RE = re.compile(r"/login\?key=([A-Za-z0-9_.~%-]+)")
DEFAULT_THREADS = 32  # IRIS_THREADS' default

WS_ECHO_APP = '''\
"""Bare flask-sock echo app: the baseline for the Web UI benchmark."""

from flask import Flask
from flask_sock import Sock

app = Flask(__name__)
sock = Sock(app)


@app.get("/health")
def health():
    return {"status": "ok"}


@sock.route("/ws")
def echo(ws):
    while True:
        ws.send(ws.receive())
'''


# --- servers ------------------------------------------------------------------------------


class Target(NamedTuple):
    """A started server and how to open a socket on it: ``ws_url(session)`` and the headers a
    browser would send (``cookie``, ``origin``; empty for the echo)."""

    kind: str
    server: Server
    http_url: str  # the Web UI's (or the echo's) base URL
    cookie: str
    origin: str
    page_key: str = ""  # the Web UI's second secret: API header and the socket's hello frame

    def ws_url(self, session: str) -> str:
        base = self.http_url.replace("http://", "ws://", 1)
        return f"{base}/ws?session={session}" if self.kind == "iris" else f"{base}/ws"


def start_ws_echo(workdir: Path, *, threads: int) -> Server:
    """The baseline: the flask-sock echo under gunicorn gthread, configured like Iris."""
    return start_echo(workdir, threads=threads, source=WS_ECHO_APP)


@contextlib.contextmanager
def running_ws_echo(workdir: Path, *, threads: int) -> Iterator[Target]:
    server = start_ws_echo(workdir, threads=threads)
    try:
        try:
            wait_healthy(server.base_url, server.process)
        except RuntimeError as exc:
            raise RuntimeError(f"ws echo: {exc}\n{log_tail(server.process)}") from None
        yield Target("echo", server, server.base_url, "", "")
    finally:
        stop_process(server.process)


def login(server: Server, ui_url: str) -> tuple[str, str]:
    """The ``iris_webui`` cookie value and the page key: the one-time key from the log, else the
    password. A login redirects to ``/#k=<page key>``."""
    key = None
    deadline = time.perf_counter() + 5.0
    while key is None and time.perf_counter() < deadline:
        found = KEY_RE.search(log_tail(server.process, lines=400))
        key = found.group(1) if found else None
        if key is None:
            time.sleep(0.05)
    with requests.Session() as http:
        if key is not None:
            response = http.get(f"{ui_url}/login", params={"key": key}, allow_redirects=False)
        else:
            print("no login key in the log; using IRIS_WEBUI_PASSWORD", file=sys.stderr)
            response = http.post(
                f"{ui_url}/login",
                data={"password": PASSWORD},
                headers={"Origin": ui_url},
                allow_redirects=False,
            )
        cookie = http.cookies.get(COOKIE)
    page_key = response.headers.get("Location", "").partition("#k=")[2]
    if response.status_code >= 400 or not cookie or not page_key:
        raise RuntimeError(f"login failed: HTTP {response.status_code} {response.text[:200]}")
    return cookie, page_key


@contextlib.contextmanager
def running_webui(workdir: Path, *, threads: int) -> Iterator[Target]:
    """``iris serve`` (offline provider) with the Web UI on its own port, logged in."""
    ui_port = free_port()
    env = {
        "IRIS_WEBUI_PORT": str(ui_port),
        "IRIS_WEBUI_PASSWORD": PASSWORD,
        "IRIS_THREADS": str(threads),
    }
    server = start_iris(workdir, extra_env=env)
    ui_url = f"http://{HOST}:{ui_port}"
    try:
        try:
            wait_healthy(server.base_url, server.process, timeout=60)
            cookie, page_key = login(server, ui_url)
        except (RuntimeError, requests.RequestException) as exc:
            raise RuntimeError(f"iris: {exc}\n{log_tail(server.process)}") from None
        yield Target("iris", server, ui_url, f"{COOKIE}={cookie}", ui_url, page_key)
    finally:
        stop_process(server.process)


def new_sessions(target: Target, count: int) -> list[str]:
    """``count`` conversations: ``POST /api/sessions`` on Iris, dummy ids for the echo."""
    if target.kind != "iris":
        return [f"echo-{i}" for i in range(count)]
    ids: list[str] = []
    headers = {
        "Cookie": target.cookie,
        "Origin": target.origin,
        "X-Iris-Page-Key": target.page_key,
    }
    with requests.Session() as http:
        for _ in range(count):
            response = http.post(
                f"{target.http_url}/api/sessions", json={}, headers=headers, timeout=30
            )
            if response.status_code not in {200, 201}:
                raise RuntimeError(
                    f"POST /api/sessions: HTTP {response.status_code} {response.text[:200]}"
                )
            ids.append(str(response.json()["id"]))
    return ids


def server_rss(master: int) -> float:
    """VmRSS of the gunicorn master plus all its descendants, in MB."""
    return rss_mb(master) + sum(rss_mb(pid) for pid in descendants(master))


# --- one socket ---------------------------------------------------------------------------


def connect(target: Target, session: str, timeout: float = 30.0) -> websocket.WebSocket:
    """Open a socket as a browser would; on Iris, wait for the ``ready`` frame."""
    if target.kind != "iris":
        return websocket.create_connection(target.ws_url(session), timeout=timeout)
    ws = websocket.create_connection(
        target.ws_url(session), timeout=timeout, cookie=target.cookie, origin=target.origin
    )
    try:
        ws.send(json.dumps({"type": "hello", "page_key": target.page_key}))
        frame = json.loads(ws.recv())
        if frame.get("type") != "ready":
            raise RuntimeError(f"first frame is not ready: {str(frame)[:200]}")
    except BaseException:
        ws.close()
        raise
    return ws


def round_trip(target: Target, ws: websocket.WebSocket, text: str) -> float:
    """Send one message and wait for its answer; returns the latency in ms. Raises
    RuntimeError on anything but the expected answer."""
    if target.kind == "echo":
        frame = json.dumps({"type": "message", "text": text})
        start = time.perf_counter()
        ws.send(frame)
        answer = ws.recv()
        elapsed = (time.perf_counter() - start) * 1000.0
        if answer != frame:
            raise RuntimeError(f"echo mismatch: {str(answer)[:200]}")
        return elapsed
    start = time.perf_counter()
    ws.send(json.dumps({"type": "message", "text": text}))
    while True:
        event = json.loads(ws.recv())
        kind = event.get("type")
        if kind == "reply" and event.get("final"):
            elapsed = (time.perf_counter() - start) * 1000.0
            if event.get("status", "completed") != "completed" or not event.get("text"):
                raise RuntimeError(f"unexpected final reply: {str(event)[:200]}")
            return elapsed
        if kind == "error":
            raise RuntimeError(f"error frame: {str(event)[:200]}")


# --- figure 1: round trip -----------------------------------------------------------------


def ping(ws: websocket.WebSocket) -> float:
    """``{"type": "ping"}`` until ``pong`` on an Iris socket: the transport alone, no turn."""
    start = time.perf_counter()
    ws.send('{"type": "ping"}')
    while True:
        event = json.loads(ws.recv())
        if event.get("type") == "pong":
            return (time.perf_counter() - start) * 1000.0
        if event.get("type") == "error":
            raise RuntimeError(f"error frame: {str(event)[:200]}")


def measure_round_trips(
    target: Target, session: str, count: int, tag: str, *, pings: bool = False
) -> list[float]:
    ws = connect(target, session)
    try:
        if pings:
            return [ping(ws) for _ in range(count)]
        return [round_trip(target, ws, f"ping {tag} {i}") for i in range(count)]
    finally:
        ws.close()


# --- figure 2: many sessions held open ----------------------------------------------------


@dataclass
class Hold:
    opened: int = 0
    replied: int = 0
    errors: list[str] = field(default_factory=list)
    idle_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    all_replied_s: float = 0.0


class Counter:
    """Counts threads reaching a step; ``wait_for(n)`` blocks until ``n`` did (or timeout)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.value = 0

    def add(self) -> None:
        with self._cond:
            self.value += 1
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.value >= n, timeout)


class PeakRss:
    """Samples the server's RSS every ``interval`` seconds in a thread of its own; ``peak_mb``
    is the highest seen (sampling outside the clients' locks, so it does not slow them)."""

    def __init__(self, master: int, interval: float = 0.05) -> None:
        self.master = master
        self.interval = interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, server_rss(self.master))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def hold_sessions(target: Target, sessions: int, timeout: float) -> Hold:
    """Open ``sessions`` sockets at once, then each sends one message and waits for the answer
    while all stay open; every socket is closed at the end."""
    master = target.server.process.pid
    # Warm up the whole path once (first turn imports and creates files), then measure idle.
    measure_round_trips(target, new_sessions(target, 1)[0], 3, "warm")
    time.sleep(0.5)
    result = Hold(idle_rss_mb=server_rss(master))
    ids = new_sessions(target, sessions)
    opened, finished = Counter(), Counter()  # finished: replied or failed
    go, release = threading.Event(), threading.Event()
    errors: list[str] = []
    lock = threading.Lock()
    replied_at: list[float] = []

    def fail(problem: str) -> None:
        with lock:
            errors.append(problem)

    def client(index: int) -> None:
        ws = None
        try:
            try:
                ws = connect(target, ids[index], timeout=timeout)
            except Exception as exc:
                fail(f"connect {index}: {type(exc).__name__}: {exc}")
                opened.add()
                finished.add()
                return
            opened.add()
            go.wait()
            try:
                round_trip(target, ws, f"hello from session {index}")
                with lock:
                    replied_at.append(time.perf_counter())
            except Exception as exc:
                fail(f"message {index}: {type(exc).__name__}: {exc}")
            finished.add()
            release.wait()
        finally:
            if ws is not None:
                ws.close()

    threads = [
        threading.Thread(target=client, args=(i,), name=f"hold-{i}", daemon=True)
        for i in range(sessions)
    ]

    try:
        with PeakRss(master) as rss:
            for thread in threads:
                thread.start()
            if not opened.wait_for(sessions, timeout):
                fail(f"only {opened.value} of {sessions} sockets opened within {timeout:.0f} s")
            started = time.perf_counter()
            go.set()
            if not finished.wait_for(sessions, timeout):
                fail(
                    f"only {finished.value} of {sessions} sessions answered within {timeout:.0f} s"
                )
            time.sleep(2 * rss.interval)  # one more sample with every socket still open
        result.peak_rss_mb = rss.peak_mb
        result.all_replied_s = (max(replied_at) - started) if replied_at else 0.0
    finally:
        go.set()
        release.set()
        for thread in threads:
            thread.join(timeout=10)
    result.opened = opened.value - sum(e.startswith("connect") for e in errors)
    result.replied = len(replied_at)
    result.errors = errors
    return result


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)  # accepted for run_all; the load here is counted, not timed
    parser.add_argument("--messages", type=int, default=1000, help="round trips per server [1000]")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up round trips [20]")
    parser.add_argument("--sessions", type=int, default=200, help="sessions held open [200]")
    parser.add_argument(
        "--hold-threads", type=int, default=256, help="IRIS_THREADS for the hold phase [256]"
    )
    parser.add_argument(
        "--hold-timeout", type=float, default=60.0, help="seconds per hold step [60]"
    )
    args = parser.parse_args()
    handle_sigterm()
    if args.messages < 2 or args.sessions < 1 or args.warmup < 0:
        parser.error("need --messages >= 2, --sessions >= 1, --warmup >= 0")

    failed = False
    latencies: dict[str, list[float]] = {"echo": [], "iris": [], "ping": []}
    holds: dict[str, Hold] = {}
    with temp_workdir() as workdir:
        # 1. Round trip, default threads, both servers side by side.
        with (
            running_webui(workdir, threads=DEFAULT_THREADS) as iris,
            running_ws_echo(workdir, threads=DEFAULT_THREADS) as echo,
        ):
            targets = {"iris": iris, "echo": echo}
            session = {kind: new_sessions(t, 1)[0] for kind, t in targets.items()}
            for kind, target in targets.items():
                measure_round_trips(target, session[kind], args.warmup, "warm")
            per_phase = args.messages // 2
            for phase, kind in enumerate(("echo", "iris", "ping", "ping", "iris", "echo")):
                target = echo if kind == "echo" else iris
                latencies[kind] += measure_round_trips(
                    target, session[target.kind], per_phase, f"p{phase}", pings=kind == "ping"
                )
            for kind, values in latencies.items():
                print(
                    f"{kind}: {len(values)} round trips, p50 {percentile(values, 50):.2f} ms, "
                    f"p99 {percentile(values, 99):.2f} ms",
                    file=sys.stderr,
                )

        # 2. Sessions held open, enough threads on both servers.
        for kind, start in (("echo", running_ws_echo), ("iris", running_webui)):
            with start(workdir, threads=args.hold_threads) as target:
                hold = holds[kind] = hold_sessions(target, args.sessions, args.hold_timeout)
            print(
                f"{kind} hold: {hold.opened} opened, {hold.replied} replied, "
                f"{len(hold.errors)} errors, {hold.all_replied_s:.2f} s, "
                f"RSS {hold.idle_rss_mb:.1f} -> {hold.peak_rss_mb:.1f} MB",
                file=sys.stderr,
            )
            if hold.errors:
                print(f"{kind} hold errors (first 3): {hold.errors[:3]}", file=sys.stderr)
                failed = True

    for name, kind in (("round_trip", "iris"), ("ping", "ping")):
        for pct in (50.0, 99.0):
            value = percentile(latencies[kind], pct)
            base = percentile(latencies["echo"], pct)
            emit(BENCH, f"{name}_p{pct:.0f}_ms", value, "ms", base, ratio(value, base))
    iris_hold, echo_hold = holds["iris"], holds["echo"]
    emit(
        BENCH,
        "hold_served",
        iris_hold.replied,
        "sessions",
        args.sessions,
        ratio(iris_hold.replied, args.sessions),
    )
    emit(BENCH, "hold_errors", len(iris_hold.errors), "errors", 0)
    emit(
        BENCH,
        "hold_all_replied_s",
        iris_hold.all_replied_s,
        "s",
        echo_hold.all_replied_s,
        ratio(iris_hold.all_replied_s, echo_hold.all_replied_s),
    )
    for metric, value, base in (
        ("hold_idle_rss_mb", iris_hold.idle_rss_mb, echo_hold.idle_rss_mb),
        ("hold_rss_mb", iris_hold.peak_rss_mb, echo_hold.peak_rss_mb),
    ):
        emit(BENCH, metric, value, "MB", base, ratio(value, base))
    per = {
        kind: (h.peak_rss_mb - h.idle_rss_mb) * 1024.0 / args.sessions for kind, h in holds.items()
    }
    emit(
        BENCH,
        "hold_rss_per_session_kb",
        per["iris"],
        "kB",
        per["echo"],
        ratio(per["iris"], per["echo"]),
    )
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(BENCH, main)

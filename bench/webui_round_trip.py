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

import sys
import threading
import time
from dataclasses import dataclass, field

from _cli import bench_parser, run_main
from _figures import emit, percentile
from _proc import PeakRss, server_rss
from _servers import temp_workdir
from _webui_client import (
    Target,
    connect,
    new_sessions,
    ping,
    round_trip,
    running_webui,
    running_ws_echo,
)

BENCH = "webui_round_trip"
DEFAULT_THREADS = 32  # IRIS_THREADS' default


# --- figure 1: round trip -----------------------------------------------------------------


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
    parser = bench_parser(__doc__)  # accepted for run_all; the load here is counted, not timed
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
            emit(BENCH, f"{name}_p{pct:.0f}_ms", value, "ms", base)
    iris_hold, echo_hold = holds["iris"], holds["echo"]
    emit(
        BENCH,
        "hold_served",
        iris_hold.replied,
        "sessions",
        args.sessions,
    )
    emit(BENCH, "hold_errors", len(iris_hold.errors), "errors", 0)
    emit(
        BENCH,
        "hold_all_replied_s",
        iris_hold.all_replied_s,
        "s",
        echo_hold.all_replied_s,
    )
    for metric, value, base in (
        ("hold_idle_rss_mb", iris_hold.idle_rss_mb, echo_hold.idle_rss_mb),
        ("hold_rss_mb", iris_hold.peak_rss_mb, echo_hold.peak_rss_mb),
    ):
        emit(BENCH, metric, value, "MB", base)
    per = {
        kind: (h.peak_rss_mb - h.idle_rss_mb) * 1024.0 / args.sessions for kind, h in holds.items()
    }
    emit(
        BENCH,
        "hold_rss_per_session_kb",
        per["iris"],
        "kB",
        per["echo"],
    )
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(BENCH, main)

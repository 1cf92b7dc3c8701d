"""Latency and throughput of ``POST /sessions/<id>/message`` against a bare gunicorn echo.

N concurrent clients (default 16), each with its own ``requests.Session`` and its own session id
(one run at a time per session, so sharing one would measure the queue), post back to back for a
fixed duration (``--seconds``) or a fixed number of requests (``--requests``). The bare echo app
under the same gunicorn configuration (gthread, 1 worker, 32 threads) gets the same load shape
(POST of the same JSON body) and is the baseline. Both servers run side by side and are measured
in ABBA order (echo, iris, iris, echo; half the budget per phase) so drift on a noisy machine
hits both alike. Each server is warmed up first.

Target: iris p50 within 3x of the bare echo's p50 (``p50_ms`` ratio <= 3).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Server,
    add_common_args,
    emit,
    handle_sigterm,
    percentile,
    ratio,
    running,
    temp_workdir,
)

BENCH = "message_latency"
P50_TARGET_RATIO = 3.0  # iris p50 within 3x of the bare echo
BODY = {"text": "ping"}


@dataclass
class LoadResult:
    latencies_ms: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, other: LoadResult) -> None:
        self.latencies_ms.extend(other.latencies_ms)
        self.elapsed_s += other.elapsed_s
        self.errors.extend(other.errors)

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_ms) / self.elapsed_s if self.elapsed_s else 0.0


def _check(kind: str, response: requests.Response) -> str | None:
    """Why a response is not a success, or None."""
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    payload = response.json()  # parsed for both servers: the client does the same work
    if kind == "iris" and payload.get("status") != "done":
        return f"status {payload.get('status')!r}: {str(payload)[:200]}"
    return None


def run_load(
    kind: str,
    server: Server,
    *,
    clients: int,
    seconds: float | None,
    total_requests: int | None,
    tag: str,
) -> LoadResult:
    """Drive ``server`` with ``clients`` threads until ``seconds`` pass or ``total_requests`` are
    done. Each phase uses fresh session ids (``tag``), so no session's history spans phases."""
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    per_client: list[int | None] = [None] * clients
    if total_requests is not None:
        per_client = [
            total_requests // clients + (1 if i < total_requests % clients else 0)
            for i in range(clients)
        ]
    results = [LoadResult() for _ in range(clients)]
    ready = threading.Barrier(clients + 1)
    go = threading.Event()
    deadline = [0.0]

    def client(index: int) -> None:
        url = f"{server.base_url}/sessions/bench-{tag}-{index}/message"
        out = results[index]
        budget = per_client[index]
        with requests.Session() as http:
            ready.wait()
            go.wait()
            done = 0
            while (budget is None and time.perf_counter() < deadline[0]) or (
                budget is not None and done < budget
            ):
                start = time.perf_counter()
                try:
                    response = http.post(url, json=BODY, headers=headers, timeout=60)
                    problem = _check(kind, response)
                except (requests.RequestException, ValueError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                elapsed_ms = (time.perf_counter() - start) * 1000.0
                done += 1
                if problem is None:
                    out.latencies_ms.append(elapsed_ms)
                else:
                    out.errors.append(problem)

    threads = [
        threading.Thread(target=client, args=(i,), name=f"{kind}-client-{i}", daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    deadline[0] = started + (seconds or 0.0)
    go.set()
    for thread in threads:
        thread.join()
    total = LoadResult(elapsed_s=time.perf_counter() - started)
    for result in results:
        total.latencies_ms.extend(result.latencies_ms)
        total.errors.extend(result.errors)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, default_seconds=10.0)
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="total requests per server instead of a duration (split over the clients)",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients [16]")
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="warm-up seconds per server [1.0]"
    )
    args = parser.parse_args()
    handle_sigterm()
    if args.clients < 1 or (args.requests is not None and args.requests < args.clients):
        parser.error("need --clients >= 1 and --requests >= --clients")
    if args.requests is None and args.seconds <= 0:
        parser.error("--seconds must be > 0")

    # ABBA: each server gets two phases of half the budget.
    half_seconds = None if args.requests is not None else args.seconds / 2
    half_requests = None if args.requests is None else max(args.requests // 2, args.clients)
    measured = {"iris": LoadResult(), "echo": LoadResult()}

    with (
        temp_workdir() as workdir,
        running("iris", workdir) as iris,
        running("echo", workdir) as echo,
    ):
        servers = {"iris": iris, "echo": echo}
        for kind, server in servers.items():
            warm = run_load(
                kind,
                server,
                clients=args.clients,
                seconds=args.warmup,
                total_requests=None,
                tag="warmup",
            )
            if warm.errors:
                print(f"{kind} warm-up errors: {warm.errors[:3]}", file=sys.stderr)
                return 1
        for phase, kind in enumerate(("echo", "iris", "iris", "echo")):
            measured[kind].add(
                run_load(
                    kind,
                    servers[kind],
                    clients=args.clients,
                    seconds=half_seconds,
                    total_requests=half_requests,
                    tag=f"p{phase}",
                )
            )

    failed = False
    for kind, result in measured.items():
        print(
            f"{kind}: {len(result.latencies_ms)} ok, {len(result.errors)} errors "
            f"in {result.elapsed_s:.2f} s",
            file=sys.stderr,
        )
        if result.errors or not result.latencies_ms:
            print(f"{kind} errors (first 3): {result.errors[:3]}", file=sys.stderr)
            failed = True
    if failed:
        return 1

    iris_r, echo_r = measured["iris"], measured["echo"]
    for metric, pct in (("p50_ms", 50.0), ("p99_ms", 99.0)):
        value = percentile(iris_r.latencies_ms, pct)
        base = percentile(echo_r.latencies_ms, pct)
        emit(BENCH, metric, value, "ms", base, ratio(value, base))
    emit(
        BENCH,
        "requests_per_s",
        iris_r.requests_per_s,
        "req/s",
        echo_r.requests_per_s,
        ratio(iris_r.requests_per_s, echo_r.requests_per_s),
    )

    p50_ratio = ratio(percentile(iris_r.latencies_ms, 50), percentile(echo_r.latencies_ms, 50))
    met = p50_ratio is not None and p50_ratio <= P50_TARGET_RATIO
    print(
        f"target p50 <= {P50_TARGET_RATIO:g}x echo: {'met' if met else 'MISSED'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{BENCH}: interrupted (servers stopped)", file=sys.stderr)
        sys.exit(130)

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

import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit, emit_percentiles, p50_within, ratio
from _load import LoadResult, Request, drive_clients, report_loads, split_evenly
from _servers import Server, running, temp_workdir

BENCH = "message_latency"
P50_TARGET_RATIO = 1.5  # iris p50 within 1.5x of the bare echo
THROUGHPUT_TARGET_RATIO = 0.8  # and at least 0.8x its requests per second
BODY = {"text": "ping"}


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
    per_client = None if total_requests is None else split_evenly(total_requests, clients)

    def request_for(index: int) -> Request:
        url = f"{server.base_url}/sessions/bench-{tag}-{index}/message"

        def one(http: requests.Session) -> tuple[float, str | None]:
            start = time.perf_counter()
            response = http.post(url, json=BODY, headers=headers, timeout=60)
            problem = _check(kind, response)
            return (time.perf_counter() - start) * 1000.0, problem

        return one

    return drive_clients(
        request_for, clients=clients, seconds=seconds, per_client=per_client, name=f"{kind}-client"
    )


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=10.0)
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

    if report_loads(measured):
        return 1

    iris_r, echo_r = measured["iris"], measured["echo"]
    emit_percentiles(BENCH, "", iris_r.latencies_ms, echo_r.latencies_ms)
    emit(BENCH, "requests_per_s", iris_r.requests_per_s, "req/s", echo_r.requests_per_s)

    met = p50_within(iris_r.latencies_ms, echo_r.latencies_ms, P50_TARGET_RATIO)
    print(
        f"target p50 <= {P50_TARGET_RATIO:g}x echo: {'met' if met else 'MISSED'}",
        file=sys.stderr,
    )
    rate = ratio(iris_r.requests_per_s, echo_r.requests_per_s)
    met = rate is not None and rate >= THROUGHPUT_TARGET_RATIO
    print(
        f"target throughput >= {THROUGHPUT_TARGET_RATIO:g}x echo: {'met' if met else 'MISSED'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

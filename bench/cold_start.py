"""Cold start and idle memory of ``iris serve`` against a bare gunicorn echo.

``cold_start_s``: time from ``Popen`` of the server to the first 200 from ``GET /health``; the
median of ``--repeats`` runs (default 3), iris and echo interleaved, each with a fresh data dir
and port. ``idle_rss_mb``: VmRSS of the gunicorn master plus all its descendants (the worker)
after the server has been up and idle for ``--idle`` seconds; ``worker_rss_mb``: the descendants
alone. The baseline is the same measurement of the bare echo app under gunicorn gthread.

Targets: cold start <= 1.5 s; idle RSS (master + worker) <= 80 MB.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit
from _proc import descendants, rss_mb
from _servers import (
    log_tail,
    running,
    start_echo,
    start_iris,
    stop_process,
    temp_workdir,
    wait_healthy,
)

BENCH = "cold_start"
COLD_START_TARGET_S = 1.5  # Popen -> first 200 from /health
IDLE_RSS_TARGET_MB = 70.0  # master + worker, idle


def cold_start(kind: str, workdir: Path) -> float:
    """Seconds from Popen to the first 200 from /health."""
    started = time.perf_counter()
    server = start_iris(workdir) if kind == "iris" else start_echo(workdir)
    try:
        wait_healthy(server.base_url, server.process, timeout=60.0, interval=0.005)
        return time.perf_counter() - started
    except RuntimeError as exc:
        raise RuntimeError(f"{kind}: {exc}\n{log_tail(server.process)}") from None
    finally:
        stop_process(server.process)


def idle_rss(kind: str, workdir: Path, idle_s: float) -> tuple[float, float]:
    """(master + descendants, descendants only) RSS in MB after ``idle_s`` seconds idle."""
    with running(kind, workdir) as server:
        time.sleep(idle_s)
        master = server.process.pid
        workers = descendants(master)
        if not workers:
            raise RuntimeError(f"{kind}: gunicorn master {master} has no worker")
        worker_mb = sum(rss_mb(pid) for pid in workers)
        return rss_mb(master) + worker_mb, worker_mb


def main() -> int:
    parser = bench_parser(
        __doc__
    )  # --seconds is accepted for run_all; this bench has no load phase
    parser.add_argument("--repeats", type=int, default=3, help="cold starts per server [3]")
    parser.add_argument(
        "--idle", type=float, default=1.0, help="idle seconds before reading RSS [1.0]"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    times: dict[str, list[float]] = {"iris": [], "echo": []}
    with temp_workdir() as workdir:
        for _ in range(args.repeats):
            for kind in ("iris", "echo"):
                times[kind].append(cold_start(kind, workdir))
        rss = {kind: idle_rss(kind, workdir, args.idle) for kind in ("iris", "echo")}

    print(
        "cold start runs (s): "
        + ", ".join(f"{k}={[round(t, 3) for t in v]}" for k, v in times.items()),
        file=sys.stderr,
    )
    iris_s, echo_s = statistics.median(times["iris"]), statistics.median(times["echo"])
    emit(BENCH, "cold_start_s", iris_s, "s", echo_s)
    (iris_total, iris_worker), (echo_total, echo_worker) = rss["iris"], rss["echo"]
    emit(BENCH, "idle_rss_mb", iris_total, "MB", echo_total)
    emit(BENCH, "worker_rss_mb", iris_worker, "MB", echo_worker)

    for name, value, target, unit in (
        ("cold start", iris_s, COLD_START_TARGET_S, "s"),
        ("idle RSS", iris_total, IDLE_RSS_TARGET_MB, "MB"),
    ):
        verdict = "met" if value <= target else "MISSED"
        print(f"target {name} <= {target:g} {unit}: {verdict}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

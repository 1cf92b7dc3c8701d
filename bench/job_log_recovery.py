"""Recovering a long bridge job log: ``GET /bridge/jobs/<id>?since=0`` on a 10,000-event log.

A job log of ``--events`` events (default 10,000: 9,999 ``status`` lines and a ``final``) is
written directly with ``iris_runtime.bridge.jobs.JobStore(data_dir).create(id)`` and
``job.append``; then a sub-agent server is started on that data dir. On start it marks
unfinished logs interrupted; this one is finished, so the bench checks it is left as written.

Figures (each the median of ``--repeats`` reads, default 9, after one warm-up read):

* ``recovery_read_ms``: ``GET /bridge/jobs/<id>?since=0`` over HTTP, response parsed, all events
  present and ``done`` true;
* ``recovery_tail_read_ms``: the same with ``since=<last seq - 1>`` (what a polling client that
  is nearly caught up asks for), one event returned;
* ``jobstore_read_ms``: ``JobStore.read(id, 0)`` in this process (no HTTP);
* ``events``: events returned by the HTTP read (baseline: events written).

The baseline of the timings is reading the same file and ``json.loads``-ing every line in this
process, measured the same way.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit
from _servers import running_subagent, temp_workdir

from iris_runtime.bridge.jobs import JobStore

BENCH = "job_log_recovery"
REQUEST_ID = "bench-recovery-1"


def write_log(data_dir: Path, events: int) -> Path:
    """A finished job log of ``events`` events, written through ``JobStore``."""
    store = JobStore(data_dir)
    job = store.create(REQUEST_ID)
    for number in range(1, events):
        job.append("status", text=f"→ step {number}: running bash (ls -la /tmp/work-{number})")
    job.append("final", text="all done", requestId=REQUEST_ID, status="done")
    store.finished(job)
    return job.path


def raw_parse(path: Path) -> list[dict[str, Any]]:
    """The baseline: read the file and parse every line, nothing else."""
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def median_ms(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up: page cache, imports, connection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main() -> int:
    parser = bench_parser(
        __doc__
    )  # --seconds is accepted for run_all; this bench has no load phase
    parser.add_argument("--events", type=int, default=10_000, help="events in the log [10000]")
    parser.add_argument("--repeats", type=int, default=9, help="timed reads per figure [9]")
    args = parser.parse_args()
    if args.events < 2 or args.repeats < 1:
        parser.error("need --events >= 2 and --repeats >= 1")

    with temp_workdir() as workdir:
        data_dir = workdir / "data"
        data_dir.mkdir(mode=0o700)
        started = time.perf_counter()
        path = write_log(data_dir, args.events)
        written_s = time.perf_counter() - started
        before = path.read_bytes()
        print(
            f"wrote {args.events} events ({len(before) / 1024:.0f} KiB) in {written_s:.2f} s "
            f"({written_s / args.events * 1e6:.0f} us per append)",
            file=sys.stderr,
        )

        with running_subagent(workdir, data_dir=data_dir) as agent, requests.Session() as http:
            if path.read_bytes() != before:
                print("the server changed a finished job log on start", file=sys.stderr)
                return 1
            url = f"{agent.bridge_url}/bridge/jobs/{REQUEST_ID}"
            http.headers["Authorization"] = f"Bearer {agent.server.token}"  # the bridge asks for it
            got: dict[str, Any] = {}

            def fetch(since: int) -> Callable[[], object]:
                def work() -> object:
                    response = http.get(url, params={"since": since}, timeout=60)
                    response.raise_for_status()
                    got[str(since)] = body = response.json()
                    return body

                return work

            recovery_ms = median_ms(fetch(0), args.repeats)
            tail_ms = median_ms(fetch(args.events - 1), args.repeats)

        store = JobStore(data_dir)
        jobstore_ms = median_ms(lambda: store.read(REQUEST_ID, 0), args.repeats)
        baseline_ms = median_ms(lambda: raw_parse(path), args.repeats)

    full, tail = got["0"], got[str(args.events - 1)]
    events = full.get("events", [])
    problems = []
    if len(events) != args.events or not full.get("done"):
        problems.append(f"since=0: {len(events)} events, done={full.get('done')}")
    if events and (events[-1].get("type") != "final" or events[-1].get("seq") != args.events):
        problems.append(f"since=0: last event {events[-1]}")
    if [e.get("seq") for e in tail.get("events", [])] != [args.events] or not tail.get("done"):
        problems.append(f"since={args.events - 1}: {str(tail)[:200]}")

    emit(BENCH, "recovery_read_ms", recovery_ms, "ms", baseline_ms)
    emit(BENCH, "recovery_tail_read_ms", tail_ms, "ms", baseline_ms)
    emit(BENCH, "jobstore_read_ms", jobstore_ms, "ms", baseline_ms)
    emit(BENCH, "events", len(events), "events", args.events)
    if problems:
        print(f"wrong recovery result: {problems}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

"""Many concurrent ``POST /bridge`` streams held open with heartbeats on one sub-agent.

The sub-agent runs the ``scripted`` provider with a reply that sleeps ``--sleep`` seconds
(default 3) before answering ``done``, ``IRIS_THREADS=256`` (threads for short requests; each
open stream holds a thread of its own, within ``IRIS_MAX_STREAMS``),
``IRIS_BRIDGE_HEARTBEAT_MS=500`` and ``IRIS_LANE_MAIN`` = the number of streams (so the runs
execute at once instead of queueing in the lane). ``--streams`` client threads (default
200), each with its own ``requests.Session`` and its own ``conversationKey``, start together and
read their stream to the end.

Figures:

* ``completed``: streams that ended with a ``final`` line saying ``done`` (baseline: streams
  started); ``dropped``: every other outcome (HTTP error, ``error`` line, broken or truncated
  stream). Any drop makes the bench exit non-zero.
* ``heartbeats_per_stream``: mean heartbeat lines per stream (baseline: sleep / interval, what
  an idle stream should carry).
* ``server_rss_mb``: VmRSS of the gunicorn master + its descendants at its peak while the
  streams are open, sampled every 50 ms (baseline: the same server idle just before the load,
  after one warm-up request).
* ``wall_s``: from the start signal until the last stream ended (baseline: the scripted sleep).

Target: all streams complete, none dropped.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit
from _proc import PeakRss, server_rss
from _servers import running_subagent, temp_workdir, write_script

BENCH = "bridge_concurrency"
NDJSON = "application/x-ndjson"
REPLY = "done"
WARMUP_TEXT = "warm-up"


@dataclass
class Outcome:
    completed: bool = False
    heartbeats: int = 0
    problem: str = ""
    accepted_s: float = 0.0  # start signal -> the ``accepted`` line
    ended_s: float = 0.0  # start signal -> the ``final`` line


def one_stream(url: str, key: str, timeout: float, started: float, auth: dict[str, str]) -> Outcome:
    out = Outcome()
    body = {"text": "please take your time", "conversationKey": key}
    headers = {"Accept": NDJSON, **auth}
    with (
        requests.Session() as http,
        http.post(url, json=body, headers=headers, stream=True, timeout=(10, timeout)) as response,
    ):
        if response.status_code != 200:
            out.problem = f"HTTP {response.status_code}: {response.text[:200]}"
            return out
        for raw in response.iter_lines():
            if not raw:
                continue
            event = json.loads(raw)
            kind = event.get("type")
            if kind == "accepted":
                out.accepted_s = time.perf_counter() - started
            elif kind == "heartbeat":
                out.heartbeats += 1
            elif kind == "final" and event.get("text") == REPLY:
                out.completed = True
                out.ended_s = time.perf_counter() - started
                return out
            elif kind in {"final", "error"}:
                out.problem = f"unexpected end: {str(event)[:200]}"
                return out
    out.problem = "stream ended without a final line"
    return out


def main() -> int:
    parser = bench_parser(
        __doc__
    )  # --seconds is accepted for run_all; the load is --streams x --sleep
    parser.add_argument("--streams", type=int, default=200, help="concurrent streams [200]")
    parser.add_argument(
        "--sleep", type=float, default=3.0, help="seconds the scripted reply sleeps [3]"
    )
    parser.add_argument(
        "--heartbeat-ms", type=int, default=500, help="IRIS_BRIDGE_HEARTBEAT_MS [500]"
    )
    parser.add_argument("--threads", type=int, default=256, help="IRIS_THREADS [256]")
    args = parser.parse_args()
    if args.streams < 1 or args.sleep <= 0 or args.heartbeat_ms < 1:
        parser.error("need --streams >= 1, --sleep > 0 and --heartbeat-ms >= 1")
    if args.threads < args.streams:
        print(
            f"warning: --threads {args.threads} < --streams {args.streams}: streams will wait "
            "for a gunicorn thread",
            file=sys.stderr,
        )

    outcomes = [Outcome() for _ in range(args.streams)]
    with temp_workdir() as workdir:
        script_file = write_script(
            workdir / "script.json",
            [
                {"when": WARMUP_TEXT, "turns": [[{"text": "ok"}]]},
                {"when": "", "turns": [[{"sleep": args.sleep}, {"text": REPLY}]]},
            ],
        )
        env = {
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(script_file),
            "IRIS_THREADS": str(args.threads),
            "IRIS_BRIDGE_HEARTBEAT_MS": str(args.heartbeat_ms),
            "IRIS_LANE_MAIN": str(args.streams),
        }
        with running_subagent(workdir, extra_env=env) as agent:
            url = f"{agent.bridge_url}/bridge"
            master = agent.server.process.pid
            fresh_mb = server_rss(master)
            auth = {"Authorization": f"Bearer {agent.server.token}"}  # the bridge asks for it
            warm = requests.post(url, json={"text": WARMUP_TEXT}, headers=auth, timeout=30)
            if warm.status_code != 200 or warm.json().get("text") != "ok":
                print(f"warm-up failed: HTTP {warm.status_code} {warm.text[:200]}", file=sys.stderr)
                return 1
            time.sleep(0.5)
            idle_mb = server_rss(master)

            ready = threading.Barrier(args.streams + 1)
            go = threading.Event()
            start_at = [0.0]
            timeout = args.sleep + 60.0

            def client(index: int) -> None:
                ready.wait()
                go.wait()
                try:
                    outcomes[index] = one_stream(url, f"cc-{index}", timeout, start_at[0], auth)
                except (requests.RequestException, ValueError) as exc:
                    outcomes[index] = Outcome(problem=f"{type(exc).__name__}: {exc}")

            threads = [
                threading.Thread(target=client, args=(i,), name=f"stream-{i}", daemon=True)
                for i in range(args.streams)
            ]
            for thread in threads:
                thread.start()
            with PeakRss(master) as rss:
                ready.wait()
                started = start_at[0] = time.perf_counter()
                go.set()
                for thread in threads:
                    thread.join()
                wall_s = time.perf_counter() - started
            peak_mb = max(idle_mb, rss.peak_mb)

    completed = sum(o.completed for o in outcomes)
    dropped = args.streams - completed
    heartbeats = statistics.fmean(o.heartbeats for o in outcomes)
    expected_heartbeats = args.sleep * 1000.0 / args.heartbeat_ms
    print(
        f"{completed}/{args.streams} completed in {wall_s:.2f} s; heartbeats per stream "
        f"min {min(o.heartbeats for o in outcomes)}, max {max(o.heartbeats for o in outcomes)}; "
        f"RSS fresh {fresh_mb:.1f} MB, idle after warm-up {idle_mb:.1f} MB, "
        f"peak {peak_mb:.1f} MB",
        file=sys.stderr,
    )
    done = [o for o in outcomes if o.completed]
    if done:
        accepted = [o.accepted_s for o in done]
        ended = [o.ended_s for o in done]
        print(
            f"accepted line after {min(accepted):.2f}..{max(accepted):.2f} s "
            f"(median {statistics.median(accepted):.2f}); final after "
            f"{min(ended):.2f}..{max(ended):.2f} s (median {statistics.median(ended):.2f})",
            file=sys.stderr,
        )
    emit(BENCH, "completed", completed, "streams", args.streams)
    emit(BENCH, "dropped", dropped, "streams")
    emit(
        BENCH,
        "heartbeats_per_stream",
        heartbeats,
        "lines",
        expected_heartbeats,
    )
    emit(BENCH, "server_rss_mb", peak_mb, "MB", idle_mb)
    emit(BENCH, "wall_s", wall_s, "s", args.sleep)

    if dropped:
        problems = sorted({o.problem for o in outcomes if not o.completed})
        print(
            f"target all {args.streams} complete: MISSED; problems: {problems[:5]}", file=sys.stderr
        )
        return 1
    print(f"target all {args.streams} complete, none dropped: met", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

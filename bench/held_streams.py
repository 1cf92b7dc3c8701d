"""A thousand held streams on one Iris: none dropped or stalled, /health and a turn still served.

One ``iris serve`` as a sub-agent (so it has a bridge port) with the Web UI on, ``scripted``
provider, ``IRIS_MAX_STREAMS`` = the streams opened (so the next one meets the limit), SSE and
bridge heartbeats every 2 s. The client holds every stream in one asyncio loop:

* ``--sse`` (400) session SSE streams, 8 per session (the per-session cap);
* ``--bridge`` (300) streamed ``POST /bridge`` whose scripted reply sleeps past the hold
  (``IRIS_LANE_MAIN`` sized so every one runs), heartbeat lines only;
* ``--sockets`` (300) Web UI sockets, logged in like a browser (one-time login link, cookie,
  Origin, hello with the page key), each on its own conversation; pings answered (wsproto).

Then, for ``--hold`` seconds (20): ``GET /health`` every 50 ms on a kept-alive connection, and
message turns on the session API, while every stream must keep receiving heartbeats. Then 20
more streams are tried: each must be refused ``503`` with ``Retry-After``. Finally every socket
must answer a ``{"type": "ping"}``.

Figures (baselines measured on the same server just before the streams open):
``held`` (baseline: streams tried), ``dropped`` and ``stalled`` (a stream closed, or silent for
3 heartbeat intervals; baseline 0), ``health_p99_ms`` / ``health_p50_ms`` while held (baseline:
the same idle), ``turn_ms`` (median message turn while held; baseline idle), ``refused``
(503s of the 20 extra; baseline 20) and ``refused_p50_ms`` (baseline: /health p50 while held),
``rss_mb`` (peak master + worker while held; baseline idle) and ``rss_per_stream_kb``,
``cpu_pct`` (worker CPU per wall second while held; baseline: idle the same time).
Targets: 0 dropped and stalled, /health p99 < 100 ms, every extra refused (else the bench fails).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit, percentile
from _held_clients import HeldStream, open_bridge, open_socket, open_sse, try_sse
from _proc import PeakRss, server_rss, worker_cpu_s
from _servers import free_port, log_tail, serving, start_subagent, temp_workdir, write_script
from _webui_client import Target, logged_in, new_sessions, webui_env

BENCH = "held_streams"
HEARTBEAT_S = 2.0
EXTRA = 20
HEALTH_TARGET_MS = 100.0


@dataclass
class Server:
    api: str
    bridge: str
    token: str
    target: Target  # the Web UI login
    master: int


class HealthSampler:
    """``GET /health`` every 50 ms on one kept-alive connection, on a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with requests.Session() as http:
            while not self._stop.wait(0.05):
                started = time.perf_counter()
                try:
                    ok = http.get(f"{self.url}/health", timeout=10).status_code == 200
                except requests.RequestException:
                    ok = False
                if ok:
                    self.samples.append((time.perf_counter() - started) * 1000)
                else:
                    self.failures += 1

    def __enter__(self) -> HealthSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def message_turns(server: Server, count: int, session: str) -> list[float]:
    times: list[float] = []
    with requests.Session() as http:
        for n in range(count):
            started = time.perf_counter()
            reply = http.post(
                f"{server.api}/sessions/{session}/message",
                json={"text": f"probe {n}"},
                headers={"Authorization": f"Bearer {server.token}"},
                timeout=60,
            )
            if reply.status_code != 200 or reply.json().get("status") != "done":
                raise RuntimeError(f"message turn failed: {reply.status_code} {reply.text[:200]}")
            times.append((time.perf_counter() - started) * 1000)
    return times


def subagent_env(script: Path, args: argparse.Namespace, ui_port: int) -> dict[str, str]:
    return {
        **webui_env(ui_port),
        "IRIS_PROVIDER": "scripted",
        "IRIS_SCRIPT_FILE": str(script),
        "IRIS_MAX_STREAMS": str(args.sse + args.bridge + args.sockets),
        "IRIS_LANE_MAIN": str(args.bridge + 8),
        "IRIS_SSE_HEARTBEAT_SECONDS": str(HEARTBEAT_S),
        "IRIS_BRIDGE_HEARTBEAT_MS": str(int(HEARTBEAT_S * 1000)),
    }


async def open_all(server: Server, args: argparse.Namespace) -> list[HeldStream]:
    sessions = new_sessions(server.target, args.sockets)
    openers = [open_sse(server.api, server.token, f"watch{n // 8}") for n in range(args.sse)]
    openers += [open_bridge(server.bridge, server.token, f"hold-{n}") for n in range(args.bridge)]
    openers += [open_socket(server.target, session) for session in sessions]
    gate = asyncio.Semaphore(64)  # connect in waves, as clients arriving would

    async def one(opener: object) -> HeldStream:
        async with gate:
            return await opener  # type: ignore[misc]

    return list(await asyncio.gather(*(one(o) for o in openers)))


def hold_phase(server: Server, seconds: float) -> tuple[HealthSampler, list[float], float, float]:
    cpu_before = worker_cpu_s(server.master)
    with HealthSampler(server.api) as health:
        turns = message_turns(server, 5, "probe-held")
        with PeakRss(server.master, interval=0.1) as rss:
            time.sleep(seconds)
    cpu = (worker_cpu_s(server.master) - cpu_before) / seconds
    return health, turns, rss.peak_mb, cpu


@dataclass
class Results:
    streams: list[HeldStream]
    opened: int
    alive: list[bool]
    extra: list[tuple[int, float]]
    idle_health: HealthSampler
    idle_turns: list[float]
    idle_rss: float
    idle_cpu: float
    health: HealthSampler
    turns: list[float]
    peak: float
    cpu: float


async def run(args: argparse.Namespace, server: Server) -> Results:
    loop = asyncio.get_running_loop()
    message_turns(server, 3, "warm-up")  # first turns load what later ones reuse
    with HealthSampler(server.api) as idle_health:
        idle_turns = message_turns(server, 5, "probe-idle")
        cpu0 = worker_cpu_s(server.master)
        await asyncio.sleep(3)
        idle_cpu = (worker_cpu_s(server.master) - cpu0) / 3
    idle_rss = server_rss(server.master)
    print(f"opening {args.sse} SSE, {args.bridge} bridge, {args.sockets} sockets", file=sys.stderr)
    started = time.monotonic()
    streams = await open_all(server, args)
    opened = sum(s.open for s in streams)
    print(f"{opened} open in {time.monotonic() - started:.1f}s; holding", file=sys.stderr)
    for stream in streams:
        stream.watch_from = time.monotonic()
    held = await loop.run_in_executor(None, hold_phase, server, args.hold)
    extra = await asyncio.gather(
        *(try_sse(server.api, server.token, f"x{n}") for n in range(EXTRA))
    )
    alive = await asyncio.gather(*(s.check() for s in streams))
    for stream in streams:
        stream.close()
    return Results(
        streams, opened, list(alive), list(extra), idle_health, idle_turns, idle_rss, idle_cpu,
        *held,
    )  # fmt: skip


def figure(metric: str, value: float, unit: str, baseline: float | None = None) -> None:
    emit(BENCH, metric, value, unit, baseline)


def report(r: Results) -> bool:
    tried = len(r.streams)
    dropped = sum(not ok for ok in r.alive)
    stalled = sum(s.longest_gap() > 3 * HEARTBEAT_S for s in r.streams if s.kind != "socket")
    health, idle = r.health.samples, r.idle_health.samples
    refusals = [ms for status, ms in r.extra if status == 503]
    figure("held", r.opened, "streams", tried)
    figure("dropped", dropped, "streams", 0)
    figure("stalled", stalled, "streams", 0)
    figure("health_p50_ms", percentile(health, 50), "ms", percentile(idle, 50))
    figure("health_p99_ms", percentile(health, 99), "ms", percentile(idle, 99))
    figure("health_failures", r.health.failures, "requests", 0)
    figure("turn_ms", statistics.median(r.turns), "ms", statistics.median(r.idle_turns))
    figure("refused", len(refusals), "requests", EXTRA)
    figure("refused_p50_ms", percentile(refusals or [math.nan], 50), "ms", percentile(health, 50))
    figure("rss_mb", r.peak, "MB", r.idle_rss)
    figure("rss_per_stream_kb", (r.peak - r.idle_rss) * 1024 / max(1, tried), "kB")
    figure("cpu_pct", 100 * r.cpu, "%", 100 * r.idle_cpu)
    health_ok = percentile(health, 99) < HEALTH_TARGET_MS
    print(f"target /health p99 < {HEALTH_TARGET_MS:g} ms: {'met' if health_ok else 'MISSED'}",
          file=sys.stderr)  # fmt: skip
    return r.opened == tried and dropped == 0 and stalled == 0 and len(refusals) == EXTRA


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--sse", type=int, default=400)
    parser.add_argument("--bridge", type=int, default=300)
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--hold", type=float, default=20.0)
    args = parser.parse_args()
    with temp_workdir() as workdir:
        script = write_script(
            workdir / "script.json", [{"when": "hold", "turns": [[{"sleep": 3600}]]}]
        )
        ui_port = free_port()
        agent = start_subagent(workdir, extra_env=subagent_env(script, args, ui_port))
        with serving(agent.server, "iris") as api:
            target = logged_in(api, ui_port)
            server = Server(api.base_url, agent.bridge_url, api.token, target, api.process.pid)
            results = asyncio.run(run(args, server))
            if not report(results):
                print(log_tail(api.process, 40), file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

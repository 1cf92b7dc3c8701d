"""Scheduled events at scale: 10,000 periodic event files, measured in this process.

The event service runs as in ``iris serve`` (its watcher and firing threads, real files, a real
``state.db``, the real clock) but delivers to a stub transport that records when each run was
handed over, so only the events machinery is measured. Baselines are measured in the same
process, on the same files, in the same run:

* ``startup_s``: ``EventService.start()`` until the first full scan has scheduled every file
  (median of ``--repeats``). Baseline: reading and ``json.loads``-ing the same files in a loop.
* ``idle_cpu_pct``: CPU of this process (all threads) per wall second while the 10,000 events are
  scheduled and none is due, over ``--seconds``. Baseline: naive polling, a thread that stats
  every file every 0.5 s (the watcher's poll interval).
* ``memory_mb``: Python heap held by the service once everything is scheduled (tracemalloc).
  Baseline: the same files parsed into plain dicts.
* ``one_shot_late_p50_ms``, ``one_shot_late_p99_ms``: how long after its instant each of
  ``--one-shots`` one-shots (instants spread over 6 s, files already scheduled) was handed to the
  transport, under load: the 10,000 periodic events stay scheduled and one of their files is
  rewritten every 20 ms, so the watcher rescans the 10,000-file folder at every poll. With
  ``--cpu-load`` a CPU-bound Python thread also competes for the interpreter (every thread that
  blocks on I/O then waits up to a switch interval, 5 ms, to run again). Baseline: a bare sleeper
  thread waiting for the same instants under the same load.

Targets (stderr): start-up under 5 s; idle CPU under 5% of a core; one-shot p99 under 250 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit, percentile
from _servers import temp_workdir

from iris_runtime.engine.transport import TransportEvent, TransportRegistry
from iris_runtime.events.service import EventService

BENCH = "events_scheduling"
STARTUP_TARGET_S = 5.0
IDLE_CPU_TARGET_PCT = 5.0
LATE_P99_TARGET_MS = 250.0


class Recorder:
    """A transport that takes every event at once and notes when it arrived."""

    transport_id = "bench"
    prompt_profile: Any = None
    stop_command_hint = ""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}

    def owns_channel(self, channel_id: str) -> bool:
        return True

    def enqueue_event(self, event: TransportEvent) -> bool:
        self.arrivals[event.text.split(":", 2)[1]] = time.time()
        return True

    def __getattr__(self, name: str) -> Any:  # the rest of the transport contract is unused
        raise AttributeError(name)


def periodic_files(data_dir: Path, count: int) -> list[Path]:
    """``count`` daily events whose time is half a day away, so none fires while measuring."""
    later = datetime.now(UTC) + timedelta(hours=12)
    body = {
        "type": "periodic",
        "channelId": "C1",
        "text": "daily digest",
        "schedule": f"{later.minute} {later.hour} * * *",
        "timezone": "UTC",
    }
    folder = data_dir / "events"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"p{i:05}.json" for i in range(count)]
    raw = json.dumps(body).encode()
    for path in paths:
        path.write_bytes(raw)
    return paths


def started_service(data_dir: Path, recorder: Recorder) -> EventService:
    registry = TransportRegistry()
    registry.add(recorder, fallback=True)  # type: ignore[arg-type]
    service = EventService(data_dir, registry)
    service.start()
    if not service.wait_ready(120):
        raise RuntimeError("the event service did not finish its first scan in 120 s")
    return service


def measure_startup(data_dir: Path, paths: list[Path], repeats: int) -> tuple[float, float]:
    service_s, baseline_s = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        parsed = [json.loads(p.read_bytes()) for p in paths]
        baseline_s.append(time.perf_counter() - started)
        del parsed
        (data_dir / "state.db").unlink(missing_ok=True)
        started = time.perf_counter()
        service = started_service(data_dir, Recorder())
        service_s.append(time.perf_counter() - started)
        service.stop()
    return statistics.median(service_s), statistics.median(baseline_s)


def cpu_percent(seconds: float) -> float:
    wall, cpu = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    return 100.0 * (time.process_time() - cpu) / (time.perf_counter() - wall)


def naive_polling(paths: list[Path], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        for path in paths:
            os.stat(path)


def measure_idle(data_dir: Path, paths: list[Path], seconds: float) -> tuple[float, float]:
    stop = threading.Event()
    poller = threading.Thread(target=naive_polling, args=(paths, stop), daemon=True)
    poller.start()
    baseline = cpu_percent(seconds)
    stop.set()
    poller.join()
    service = started_service(data_dir, Recorder())
    try:
        time.sleep(1.0)  # let the start-up work settle
        return cpu_percent(seconds), baseline
    finally:
        service.stop()


def measure_memory(data_dir: Path, paths: list[Path]) -> tuple[float, float]:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        parsed = [json.loads(p.read_bytes()) for p in paths]
        baseline = tracemalloc.get_traced_memory()[0] - before
        del parsed
        before = tracemalloc.get_traced_memory()[0]
        service = started_service(data_dir, Recorder())
        held = tracemalloc.get_traced_memory()[0] - before
        service.stop()
    finally:
        tracemalloc.stop()
    return held / 2**20, baseline / 2**20


class Load:
    """An event file rewritten every 20 ms (and optionally a CPU-bound thread), until stopped."""

    def __init__(self, churn: Path, cpu: bool) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._churn, args=(churn,), daemon=True)]
        if cpu:
            self._threads.append(threading.Thread(target=self._burn, daemon=True))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _burn(self) -> None:
        while not self._stop.is_set():
            sum(i * i for i in range(10_000))

    def _churn(self, path: Path) -> None:
        body = json.loads(path.read_text())
        n = 0
        while not self._stop.wait(0.02):
            n += 1
            quick_write(path, {**body, "text": f"edit {n}"})


def quick_write(path: Path, body: dict[str, Any]) -> None:
    """Write-then-rename without fsync: the bench's own writes should cost it little."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(path)


def instants(count: int, ahead: float) -> list[float]:
    """``count`` instants spread evenly over 6 s, the first ``ahead`` seconds from now."""
    start = time.time() + ahead
    return [start + 6.0 * i / count for i in range(count)]


def sleeper(at: list[float], lateness: list[float]) -> None:
    wake = threading.Event()
    for instant in at:
        while (left := instant - time.time()) > 0:
            wake.wait(left)
        lateness.append(1000.0 * (time.time() - instant))


def measure_lateness(
    data_dir: Path, paths: list[Path], count: int, cpu: bool, startup: float
) -> tuple[list[float], list[float]]:
    baseline: list[float] = []
    with Load(paths[0], cpu):
        thread = threading.Thread(target=sleeper, args=(instants(count, 3.0), baseline))
        thread.start()
        thread.join()
    # The one-shots are on disk before the service starts, and their instants come after its
    # start-up: this measures firing, not how soon a new file is noticed.
    due = write_one_shots(data_dir, instants(count, 3.0 + 3 * startup))
    recorder = Recorder()
    service = started_service(data_dir, recorder)
    try:
        with Load(paths[0], cpu):
            wait_until(lambda: len(recorder.arrivals) >= count, 120)
    finally:
        service.stop()
    late = [1000.0 * (recorder.arrivals[rel] - at) for rel, at in due.items()]
    return late, baseline


def write_one_shots(data_dir: Path, at: list[float]) -> dict[str, float]:
    due: dict[str, float] = {}
    for i, instant in enumerate(at):
        rel = f"events/once{i:04}.json"
        when = datetime.fromtimestamp(instant, UTC).isoformat()
        body = {"type": "one-shot", "channelId": "C1", "text": "ping", "at": when}
        quick_write(data_dir / rel, body)
        due[rel] = instant
    return due


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every one-shot arrived within {timeout:g} s")
        time.sleep(0.05)


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=10.0)  # --seconds: the idle CPU window
    parser.add_argument("--events", type=int, default=10_000, help="periodic files [10000]")
    parser.add_argument("--repeats", type=int, default=3, help="start-ups to time [3]")
    parser.add_argument("--one-shots", type=int, default=300, help="one-shots timed [300]")
    parser.add_argument(
        "--cpu-load", action="store_true", help="add a CPU-bound thread to the lateness load"
    )
    args = parser.parse_args()
    with temp_workdir() as workdir:
        paths = periodic_files(workdir, args.events)
        startup, startup_base = measure_startup(workdir, paths, args.repeats)
        emit(BENCH, "startup_s", startup, "s", startup_base)
        idle, idle_base = measure_idle(workdir, paths, args.seconds)
        emit(BENCH, "idle_cpu_pct", idle, "%", idle_base)
        memory, memory_base = measure_memory(workdir, paths)
        emit(BENCH, "memory_mb", memory, "MB", memory_base)
        late, late_base = measure_lateness(workdir, paths, args.one_shots, args.cpu_load, startup)
    for pct in (50, 99):
        value, base = percentile(late, pct), percentile(late_base, pct)
        emit(BENCH, f"one_shot_late_p{pct}_ms", value, "ms", base)
    for name, value, target, unit in (
        ("start-up", startup, STARTUP_TARGET_S, "s"),
        ("idle CPU", idle, IDLE_CPU_TARGET_PCT, "%"),
        ("one-shot p99 lateness", percentile(late, 99), LATE_P99_TARGET_MS, "ms"),
    ):
        verdict = "met" if value <= target else "MISSED"
        print(f"target {name} <= {target:g} {unit}: {verdict}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

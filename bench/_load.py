"""Concurrent load: client threads, each on its own HTTP session, making requests back to back
for a while or a number of times; what they measured, and the report of their errors."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import requests

# One request on a client's own session: (latency in ms, why it failed or None).
Request = Callable[[requests.Session], tuple[float, str | None]]


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


def drive_clients(
    request_for: Callable[[int], Request],
    *,
    clients: int,
    seconds: float | None = None,
    per_client: Sequence[int] | None = None,
    name: str = "client",
) -> LoadResult:
    """Run ``clients`` threads, each posting back to back with ``request_for(index)`` on its own
    HTTP session, until ``seconds`` pass or each has made its ``per_client`` requests. All start
    together (a barrier), so the wall time is the load's, not the threads' start-up."""
    results = [LoadResult() for _ in range(clients)]
    ready = threading.Barrier(clients + 1)
    go = threading.Event()
    deadline = [0.0]

    def client(index: int) -> None:
        one = request_for(index)
        budget = per_client[index] if per_client is not None else None
        out = results[index]
        with requests.Session() as http:
            ready.wait()
            go.wait()
            done = 0
            while (budget is None and time.perf_counter() < deadline[0]) or (
                budget is not None and done < budget
            ):
                try:
                    elapsed_ms, problem = one(http)
                except (requests.RequestException, ValueError) as exc:
                    elapsed_ms, problem = 0.0, f"{type(exc).__name__}: {exc}"
                done += 1
                if problem is None:
                    out.latencies_ms.append(elapsed_ms)
                else:
                    out.errors.append(problem)

    threads = [
        threading.Thread(target=client, args=(i,), name=f"{name}-{i}", daemon=True)
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
        total.add(result)
    return total


def split_evenly(total: int, clients: int) -> list[int]:
    """``total`` requests shared out over ``clients`` (the first ones take the remainder)."""
    return [total // clients + (1 if i < total % clients else 0) for i in range(clients)]


def report_loads(measured: Mapping[str, LoadResult]) -> bool:
    """One stderr line per kind of load (requests, errors, time, rate) and its first errors;
    True when any kind had an error or no success at all."""
    failed = False
    for kind, result in measured.items():
        print(
            f"{kind}: {len(result.latencies_ms)} ok, {len(result.errors)} errors "
            f"in {result.elapsed_s:.2f} s ({result.requests_per_s:.0f} req/s)",
            file=sys.stderr,
        )
        if result.errors or not result.latencies_ms:
            print(f"{kind} errors (first 3): {result.errors[:3]}", file=sys.stderr)
            failed = True
    return failed

"""Round trip of ``POST /bridge`` on a sub-agent for a one-word reply, against a bare gunicorn echo.

The sub-agent (``iris serve`` with ``AGENT_NAME``/``BRIDGE_PORT``) runs the ``scripted`` provider
with one rule that answers every message with ``ok``, so the figure is the bridge and runtime
overhead, not a model. N concurrent clients (default 8), each with its own ``requests.Session``
and its own ``conversationKey`` (one run at a time per key, so sharing one would measure the
queue), post back to back in two shapes:

* ``stream``: ``Accept: application/x-ndjson``, timed until the ``final`` line has been read;
* ``plain``: one JSON body ``{"text", "requestId", "status"}``.

The baseline is the bare echo app under gunicorn gthread (1 worker, 32 threads, like Iris) with
the same client load (POST of the same JSON body, response parsed). All three run side by side
and are measured in the order echo, stream, plain, plain, stream, echo (half of ``--seconds`` per
phase, fresh conversation keys per phase) after a warm-up, so drift hits them alike.

Target: p50 of both shapes within 3x of the echo's p50 (``*_p50_ms`` ratio <= 3).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit_percentiles, p50_within
from _load import LoadResult, Request, drive_clients, report_loads
from _servers import running, running_subagent, temp_workdir, write_script

BENCH = "bridge_round_trip"
P50_TARGET_RATIO = 2.0  # bridge p50 within 2x of the bare echo
REPLY = "ok"
NDJSON = "application/x-ndjson"
KINDS = ("echo", "stream", "plain")


# One request of each shape: returns (latency in ms, problem or None).
Call = Callable[[requests.Session, str, dict[str, str]], tuple[float, str | None]]


def call_echo(http: requests.Session, url: str, body: dict[str, str]) -> tuple[float, str | None]:
    start = time.perf_counter()
    response = http.post(url, json=body, timeout=60)
    payload = response.json()
    elapsed = (time.perf_counter() - start) * 1000.0
    if response.status_code != 200 or payload.get("echo") != body:
        return elapsed, f"HTTP {response.status_code}: {response.text[:200]}"
    return elapsed, None


def call_plain(http: requests.Session, url: str, body: dict[str, str]) -> tuple[float, str | None]:
    start = time.perf_counter()
    response = http.post(url, json=body, timeout=60)
    payload = response.json()
    elapsed = (time.perf_counter() - start) * 1000.0
    if response.status_code != 200:
        return elapsed, f"HTTP {response.status_code}: {response.text[:200]}"
    if payload.get("status") != "done" or payload.get("text") != REPLY:
        return elapsed, f"unexpected body: {str(payload)[:200]}"
    return elapsed, None


def call_stream(http: requests.Session, url: str, body: dict[str, str]) -> tuple[float, str | None]:
    start = time.perf_counter()
    with http.post(url, json=body, headers={"Accept": NDJSON}, stream=True, timeout=60) as response:
        if response.status_code != 200:
            return (time.perf_counter() - start) * 1000.0, f"HTTP {response.status_code}"
        final: dict[str, object] | None = None
        elapsed = 0.0
        for raw in response.iter_lines():
            if not raw:
                continue
            event = json.loads(raw)
            if event.get("type") in {"final", "error"}:
                elapsed = (time.perf_counter() - start) * 1000.0
                final = event
                break
        for _ in response.iter_content(chunk_size=65536):  # drain, so the connection is reused
            pass
    if final is None:
        return (time.perf_counter() - start) * 1000.0, "stream ended without a final line"
    if final.get("type") != "final" or final.get("text") != REPLY:
        return elapsed, f"unexpected end: {str(final)[:200]}"
    return elapsed, None


CALLS: dict[str, Call] = {"echo": call_echo, "stream": call_stream, "plain": call_plain}


def run_load(
    url: str, call: Call, *, clients: int, seconds: float, tag: str, auth: dict[str, str]
) -> LoadResult:
    """``clients`` threads post back to back to ``url`` for ``seconds``; client ``i`` always uses
    conversation key ``rt-<tag>-<i>``. Every request carries ``auth`` (the bridge's token; the
    echo baseline gets it too, so both pay for the same header)."""

    def request_for(index: int) -> Request:
        body = {"text": "ping", "conversationKey": f"rt-{tag}-{index}"}

        def one(http: requests.Session) -> tuple[float, str | None]:
            http.headers.update(auth)
            return call(http, url, body)

        return one

    return drive_clients(request_for, clients=clients, seconds=seconds, name=f"client-{tag}")


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=6.0)  # per shape, split over its two phases
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients [8]")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per shape [1.0]")
    args = parser.parse_args()
    if args.clients < 1 or args.seconds <= 0:
        parser.error("need --clients >= 1 and --seconds > 0")

    measured = {kind: LoadResult() for kind in KINDS}
    with temp_workdir() as workdir:
        script_file = write_script(
            workdir / "script.json", [{"when": "", "turns": [[{"text": REPLY}]]}]
        )
        env = {"IRIS_PROVIDER": "scripted", "IRIS_SCRIPT_FILE": str(script_file)}
        with (
            running_subagent(workdir, extra_env=env) as agent,
            running("echo", workdir) as echo,
        ):
            auth = {"Authorization": f"Bearer {agent.server.token}"}
            urls = {
                "echo": f"{echo.base_url}/bridge",
                "stream": f"{agent.bridge_url}/bridge",
                "plain": f"{agent.bridge_url}/bridge",
            }
            for kind in KINDS:
                warm = run_load(
                    urls[kind],
                    CALLS[kind],
                    clients=args.clients,
                    seconds=args.warmup,
                    tag=f"w{kind}",
                    auth=auth,
                )
                if warm.errors:
                    print(f"{kind} warm-up errors: {warm.errors[:3]}", file=sys.stderr)
                    return 1
            order = ("echo", "stream", "plain", "plain", "stream", "echo")
            for phase, kind in enumerate(order):
                measured[kind].add(
                    run_load(
                        urls[kind],
                        CALLS[kind],
                        clients=args.clients,
                        seconds=args.seconds / 2,
                        tag=f"p{phase}",
                        auth=auth,
                    )
                )

    if report_loads(measured):
        return 1

    echo_lat = measured["echo"].latencies_ms
    verdicts: list[str] = []
    for kind in ("stream", "plain"):
        emit_percentiles(BENCH, kind, measured[kind].latencies_ms, echo_lat)
        met = p50_within(measured[kind].latencies_ms, echo_lat, P50_TARGET_RATIO)
        verdicts.append(f"{kind} {'met' if met else 'MISSED'}")
    print(f"target p50 <= {P50_TARGET_RATIO:g}x echo: {', '.join(verdicts)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

"""Agent-loop overhead per turn, model time excluded.

One turn through a served Iris (HTTP → engine → anthropic provider → the official SDK) against a
zero-latency wire-level fake of the Anthropic API, beside the bare SDK call against the same fake
in the same run. ``runtime_turn`` is a turn through the engine in-process (prompt, session log,
agent loop, provider, SDK); its ratio to the bare call is the figure with the ≤ 1.3 target.
``served_turn`` adds the HTTP hop into ``iris serve``.
"""

from __future__ import annotations

import sys
import time

import anthropic
import requests
from _cli import bench_parser, run_main
from _figures import emit, percentile
from _servers import anthropic_env, running_iris, temp_workdir

from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.runtime import Runtime
from iris_runtime.testing.fake_llm import FakeAnthropic

BENCH = "provider_overhead"
KEY = "bench-key"
TARGET_RATIO = 1.3
BLOCK = 10  # turns per block; bare and engine blocks alternate
MODEL = "claude-sonnet-5-5"


def timed(calls: int, call: object) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def bare_sdk(client: anthropic.Anthropic) -> None:
    """The same streamed call the provider makes, with one long-lived client as it keeps one."""
    with client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True
    ) as events:
        for _ in events:
            pass


def runtime_turn(runtime: Runtime, number: int) -> None:
    """One turn through the engine (prompt, logs, agent loop, provider, SDK), without HTTP."""
    bridge = runtime.engine.transports.get("bridge")
    assert isinstance(bridge, BridgeTransport)
    result = bridge.inject_session_message(TransportEvent(f"SESSION-b{number}", "hi")).wait(30)
    if result.status != "done":
        raise RuntimeError(f"turn failed: {result.error}")


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    with temp_workdir() as workdir, FakeAnthropic(api_key=KEY) as fake:
        settings = Settings.from_env(
            {
                "IRIS_DATA_DIR": str(workdir / "inproc"),
                "IRIS_PROVIDER": "anthropic",
                "ANTHROPIC_API_KEY": KEY,
                "ANTHROPIC_BASE_URL": fake.base_url,
                "IRIS_MODEL": MODEL,
                "IRIS_LOAD_PLUGINS": "",
            }
        )
        client = anthropic.Anthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
        runtime = Runtime.build(settings)
        runtime.start()
        turns = iter(range(10**9))
        try:
            timed(20, lambda: bare_sdk(client))  # warm-up: connections, imports
            timed(20, lambda: runtime_turn(runtime, next(turns)))
            # Blocks of 10 taking turns, so a machine that speeds up or slows down during the
            # run (other load, CPU frequency) weighs on both sides alike.
            bare, loop = [], []
            for _ in range(max(1, args.turns // BLOCK)):
                bare += timed(BLOCK, lambda: bare_sdk(client))
                loop += timed(BLOCK, lambda: runtime_turn(runtime, next(turns)))
        finally:
            runtime.stop()
        with (
            running_iris(workdir, extra_env=anthropic_env(fake.base_url, KEY, MODEL)) as server,
            requests.Session() as http,
        ):
            headers = {"Authorization": f"Bearer {server.token}"}
            counter = iter(range(10**9))

            def served_turn() -> None:
                # A fresh session each turn, so context growth does not enter the figure.
                response = http.post(
                    f"{server.base_url}/sessions/b{next(counter)}/message",
                    json={"text": "hi"},
                    headers=headers,
                    timeout=30,
                )
                response.raise_for_status()

            timed(20, served_turn)
            served = timed(args.turns, served_turn)
    bare_p50 = percentile(bare, 50)
    loop_p50 = percentile(loop, 50)
    served_p50 = percentile(served, 50)
    emit(BENCH, "runtime_turn_p50_ms", loop_p50, "ms", bare_p50)
    emit(BENCH, "runtime_overhead_ms", loop_p50 - bare_p50, "ms")
    emit(BENCH, "served_turn_p50_ms", served_p50, "ms", bare_p50)
    emit(BENCH, "served_overhead_ms", served_p50 - bare_p50, "ms")
    verdict = "met" if loop_p50 <= TARGET_RATIO * bare_p50 else "MISSED"
    print(f"target runtime turn <= {TARGET_RATIO}x bare SDK: {verdict}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

"""Background sub-agents: 50 children spawned in one turn against a zero-latency model.

A served Iris (anthropic provider, the wire-level fake in this process answering at once) is asked
for one turn in which the model calls ``sessions_spawn`` 50 times. Figures:

- ``spawn_to_accepted_p50_ms``: one ``sessions_spawn`` call, from the tool's start to its end as
  the session's event stream shows them; baseline: ``bash`` running ``true`` in a turn of the same
  shape (a cheap real tool: one short process), so the ratio says how spawning compares to the
  cheapest thing a tool does outside Iris;
- ``all_announced_s``: from sending the message until all 50 announces are in the session's
  log; baseline: one child spawned alone, spawned to announced, times 50 (the ratio below 1 is
  what the ``subagent`` lane's parallelism buys);
- ``peak_rss_mb``: the serving worker's peak resident memory (VmHWM) after the run; baseline:
  its resident memory before the turn.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import requests
from _cli import bench_parser, run_main
from _figures import emit, percentile
from _proc import children, status_kb
from _servers import anthropic_env, running_iris, temp_workdir

from iris_runtime.session_agents.announce import ANNOUNCE_PROMPT
from iris_runtime.testing.fake_llm import FakeAnthropic, Reply, Text, ToolCall

BENCH = "session_subagents"
CHILDREN = 50
KEY = "bench-key"
CHILD_LINE = "You are a background sub-agent"


def _text(body: dict[str, Any]) -> tuple[str, str, bool]:
    """(system, the last user text, whether the last message holds tool results)."""
    system = body.get("system", "")
    if isinstance(system, list):
        system = "".join(block.get("text", "") for block in system)
    last = body["messages"][-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    results = any(b["type"] == "tool_result" for b in blocks)
    return system, "".join(b.get("text", "") for b in blocks if b["type"] == "text"), results


def respond(body: dict[str, Any]) -> Reply:
    system, text, results = _text(body)
    if CHILD_LINE in system:
        return Reply([Text("summary" if text == ANNOUNCE_PROMPT else "done")])
    if results:
        return Reply([Text("ok")])
    count, _, tool = text.partition(" ")
    args: dict[str, Any] = (
        {"task": "count to three"} if tool == "sessions_spawn" else {"command": "true"}
    )
    return Reply([ToolCall(tool, args, id=f"toolu_{i}") for i in range(int(count))])


class Stream:
    """The session's SSE stream, with each event's arrival time."""

    def __init__(self, base_url: str, token: str, session: str) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._response = requests.get(
            f"{base_url}/sessions/{session}/stream",
            headers={"Authorization": f"Bearer {token}"},
            stream=True,
            timeout=600,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self._response.iter_lines():
                if line.startswith(b"data: "):
                    self.events.append((time.perf_counter(), json.loads(line[6:])))
        except (requests.RequestException, ValueError, AttributeError):
            return

    def close(self) -> None:
        self._response.close()


def tool_latencies(events: list[tuple[float, dict[str, Any]]], name: str) -> list[float]:
    started = {e["id"]: t for t, e in events if e.get("type") == "tool" and e["phase"] == "start"}
    return [
        (t - started[e["id"]]) * 1000
        for t, e in events
        if e.get("type") == "tool" and e["phase"] == "end" and e["name"] == name
    ]


def turn(base_url: str, token: str, session: str, text: str) -> None:
    reply = requests.post(
        f"{base_url}/sessions/{session}/message",
        json={"text": text},
        headers={"Authorization": f"Bearer {token}"},
        timeout=600,
    )
    reply.raise_for_status()


def announced(base_url: str, token: str, session: str) -> int:
    reply = requests.get(
        f"{base_url}/sessions/{session}/history",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    reply.raise_for_status()
    return sum(1 for e in reply.json()["entries"] if e.get("announce"))


def wait_announced(base_url: str, token: str, session: str, count: int) -> float:
    deadline = time.monotonic() + 600
    while announced(base_url, token, session) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{session}: fewer than {count} announces after 600 s")
        time.sleep(0.01)
    return time.perf_counter()


def measure(base_url: str, token: str, worker: int) -> None:
    # Warm-up, and the single child's spawned-to-announced time.
    started = time.perf_counter()
    turn(base_url, token, "single", "1 sessions_spawn")
    single = wait_announced(base_url, token, "single", 1) - started

    stream = Stream(base_url, token, "baseline")
    time.sleep(0.2)
    turn(base_url, token, "baseline", f"{CHILDREN} bash")
    time.sleep(0.2)
    stream.close()
    baseline_ms = percentile(tool_latencies(stream.events, "bash"), 50)

    rss_before = status_kb(worker, "VmRSS") / 1024
    stream = Stream(base_url, token, "fifty")
    time.sleep(0.2)
    started = time.perf_counter()
    turn(base_url, token, "fifty", f"{CHILDREN} sessions_spawn")
    done = wait_announced(base_url, token, "fifty", CHILDREN)
    stream.close()
    spawn_ms = percentile(tool_latencies(stream.events, "sessions_spawn"), 50)
    peak = status_kb(worker, "VmHWM") / 1024

    emit(BENCH, "spawn_to_accepted_p50_ms", spawn_ms, "ms", baseline_ms)
    all_s = done - started
    emit(BENCH, "all_announced_s", all_s, "s", single * CHILDREN)
    emit(BENCH, "peak_rss_mb", peak, "MB", rss_before)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.parse_args()
    with FakeAnthropic(api_key=KEY) as fake, temp_workdir() as workdir:
        fake.respond_with(respond)
        env = {
            **anthropic_env(fake.base_url, KEY, "claude-sonnet-5-5"),
            "IRIS_LOG_LEVEL": "warning",
        }
        with running_iris(workdir, extra_env=env) as server:
            [worker] = children(server.process.pid)
            measure(server.base_url, server.token, worker)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

"""ACP round trips: a one-chunk ACP turn through served Iris (process reused, and started each
turn), against a bare SDK client talking to the same agent; and ``iris acp``'s prompt round trip
against the SDK's own echo agent.

The agent is an echo agent written with the official SDK (``ECHO_AGENT`` below): one chunk per
prompt, nothing else. Iris (``iris serve``, offline provider, never called) hosts it as ``@coder``;
one client posts ``@coder echo ping`` to ``POST /sessions/<id>/message`` back to back:

- warm: always the same session, so the agent process is reused;
- cold: two sessions taking turns, so each turn kills the other chat's process and starts one
  (spawn, ``initialize``, ``session/new``, ``session/prompt``).

Baselines, in this process with the official SDK's client side: warm, prompts on one session of
one spawned agent; cold, spawn + initialize + new session + prompt each time. Phases alternate
baseline and Iris after a warm-up.

``iris acp``: the SDK client prompts an ``iris acp`` process (scripted provider echoing) on one
session; baseline: the same client prompting the SDK-built agent directly.

Figures: ``warm_turn_p50_ms``, ``cold_turn_p50_ms``, ``iris_acp_prompt_p50_ms``; each ``ratio``
is value / baseline.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import bench_parser, run_main
from _figures import emit, percentile
from _servers import running_iris, temp_workdir, write_script

BENCH = "acp_round_trip"

ECHO_AGENT = """
import asyncio, uuid
from acp import PROTOCOL_VERSION, run_agent, update_agent_message_text
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse


class Echo:
    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, **kwargs):
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd, **kwargs):
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def prompt(self, session_id, prompt, **kwargs):
        text = "".join(b.text for b in prompt if b.type == "text").removeprefix("echo ")
        await self.conn.session_update(session_id, update_agent_message_text("You said: " + text))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id, **kwargs):
        return None


asyncio.run(run_agent(Echo()))
"""


class Quiet:
    """A client that takes the updates and answers nothing else (the agent asks nothing)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content = getattr(update, "content", None)
        if content is not None and getattr(content, "type", "") == "text":
            self.chunks.append(content.text)


async def _connect(argv: list[str], env: dict[str, str] | None = None) -> Any:
    from acp import PROTOCOL_VERSION, spawn_agent_process

    client = Quiet()
    context = spawn_agent_process(client, argv[0], *argv[1:], env=env)  # type: ignore[arg-type]
    conn, _process = await context.__aenter__()
    await conn.initialize(protocol_version=PROTOCOL_VERSION)
    session = await conn.new_session(cwd=os.getcwd())
    return context, conn, session.session_id, client


async def _prompt(conn: Any, session_id: str, text: str) -> None:
    from acp import text_block

    await conn.prompt(session_id=session_id, prompt=[text_block(text)])


def sdk_warm(argv: list[str], turns: int, env: dict[str, str] | None = None) -> list[float]:
    async def go() -> list[float]:
        context, conn, session_id, _client = await _connect(argv, env)
        times = []
        try:
            for _ in range(turns):
                start = time.perf_counter()
                await _prompt(conn, session_id, "echo ping")
                times.append((time.perf_counter() - start) * 1000.0)
        finally:
            await context.__aexit__(None, None, None)
        return times

    return asyncio.run(go())


def sdk_cold(argv: list[str], turns: int) -> list[float]:
    async def go() -> list[float]:
        times = []
        for _ in range(turns):
            start = time.perf_counter()
            context, conn, session_id, _client = await _connect(argv)
            await _prompt(conn, session_id, "echo ping")
            times.append((time.perf_counter() - start) * 1000.0)
            await context.__aexit__(None, None, None)
        return times

    return asyncio.run(go())


def iris_turns(url: str, token: str, sessions: list[str], turns: int) -> list[float]:
    times = []
    with requests.Session() as http:
        for index in range(turns):
            session = sessions[index % len(sessions)]
            start = time.perf_counter()
            response = http.post(
                f"{url}/sessions/{session}/message",
                json={"text": "@coder echo ping"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=120,
            )
            times.append((time.perf_counter() - start) * 1000.0)
            text = response.json().get("text", "") if response.ok else ""
            if not text.endswith("You said: ping"):
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
    return times


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--turns", type=int, default=40, help="warm turns per phase [40]")
    parser.add_argument("--cold-turns", type=int, default=8, help="cold turns per phase [8]")
    args = parser.parse_args()
    warm, warm_base, cold, cold_base, acp_iris, acp_base = [], [], [], [], [], []
    with temp_workdir() as workdir:
        (workdir / "echo_agent.py").write_text(ECHO_AGENT)
        argv = [sys.executable, str(workdir / "echo_agent.py")]
        agents_d = workdir / "agents.d"
        agents_d.mkdir()
        manifest = {"kind": "coder", "label": "Coder", "bin": argv[0], "args": argv[1:]}
        (agents_d / "coder.json").write_text(json.dumps(manifest))
        env = {
            "IRIS_CUSTOM_AGENTS_DIR": str(agents_d),
            "IRIS_REACH_SOCKET": str(workdir / "reach.sock"),
        }
        with running_iris(workdir / "iris", extra_env=env) as iris:
            iris_turns(iris.base_url, iris.token, ["w"], 3)  # warm-up: the process starts
            sdk_warm(argv, 3)
            for _ in range(2):
                warm_base += sdk_warm(argv, args.turns)
                warm += iris_turns(iris.base_url, iris.token, ["w"], args.turns)
                cold_base += sdk_cold(argv, args.cold_turns)
                cold += iris_turns(iris.base_url, iris.token, ["c1", "c2"], args.cold_turns)
        script = write_script(workdir / "script.json", [])
        iris_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("IRIS_")},
            "IRIS_DATA_DIR": str(workdir / "acp-data"),
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(script),
        }
        iris_acp = [sys.executable, "-m", "iris_runtime", "acp"]
        sdk_warm(iris_acp, 3, iris_env)
        for _ in range(2):
            acp_base += sdk_warm(argv, args.turns)
            acp_iris += sdk_warm(iris_acp, args.turns, iris_env)
    for metric, value, base in (
        ("warm_turn_p50_ms", warm, warm_base),
        ("cold_turn_p50_ms", cold, cold_base),
        ("iris_acp_prompt_p50_ms", acp_iris, acp_base),
    ):
        v, b = percentile(value, 50.0), percentile(base, 50.0)
        emit(BENCH, metric, v, "ms", b)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

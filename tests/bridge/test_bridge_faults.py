"""Bridge failure modes, with real processes only: dropped streams, killed and restarted agents,
a restarted Iris, old-style agents and unreachable ones."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from iris_runtime.bridge.client import BridgeCall, BridgeError, call_agent_bridge
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import NDJSON, SubAgent, register
from tests.bridge.fault_tools import (
    Background,
    CuttingProxy,
    OldAgent,
    kill_hard,
    log_entries,
    wait_for,
)

StartSubAgent = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]


# -- 1. a dropped stream is recovered from the job log -------------------------------------------


def test_mid_stream_drop_is_recovered_from_the_job_log(
    start_subagent: StartSubAgent, cutting_proxy: Callable[[int], CuttingProxy]
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "dig",
                "turns": [
                    [
                        {"thinking": "let me look"},
                        {"tool": "bash", "args": {"command": "sleep 1; echo step"}},
                    ],
                    [{"text": "the answer"}],
                ],
            }
        ]
    )
    proxy = cutting_proxy(sub.bridge_port)
    statuses: list[str] = []

    reply = call_agent_bridge(
        BridgeCall(
            bridge_url=proxy.url,
            text="dig into it",
            idle_timeout=20,
            on_status=statuses.append,
            agent="helper",
            token=sub.token,  # the job-log polls carry it too
        )
    )

    assert reply.text == "the answer"
    assert reply.status == "done"
    assert statuses and any("bash" in s for s in statuses), statuses
    # The first connection really was cut after the status line, before the reply...
    assert proxy.cut.is_set()
    assert b'"type":"status"' in proxy.forwarded_before_cut
    assert b'"type":"final"' not in proxy.forwarded_before_cut
    # ...and the reply came through later connections: polls of the job log.
    assert proxy.connections >= 2
    job = requests.get(
        f"{sub.bridge_url}/bridge/jobs/{reply.request_id}", headers=sub.auth, timeout=10
    ).json()
    assert job["done"] is True
    assert job["events"][-1]["type"] == "final" and job["events"][-1]["text"] == "the answer"


# -- 2. kill -9 of the sub-agent mid-run ----------------------------------------------------------


def test_killed_subagent_gives_a_prompt_error_naming_the_request(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "long job",
                "turns": [
                    [{"tool": "bash", "args": {"command": "true"}}],
                    [{"thinking": "taking my time"}, {"sleep": 120}, {"text": "never"}],
                ],
            }
        ]
    )
    request_id = f"req-kill-{uuid.uuid4().hex[:12]}"
    first_status = threading.Event()
    statuses: list[str] = []

    def on_status(text: str) -> None:
        statuses.append(text)
        first_status.set()

    gave_up = threading.Event()

    def killer() -> None:
        try:
            first_status.wait(15)
            time.sleep(0.3)  # let the run move on into its long sleep
            kill_hard(sub.server)
        finally:
            if sub.server.process is not None and sub.server.process.poll() is None:
                gave_up.set()  # the kill failed: make the call return instead of hanging

    assassin = Background(killer)
    started = time.monotonic()
    error: BridgeError | None = None
    try:
        call_agent_bridge(
            BridgeCall(
                bridge_url=sub.bridge_url,
                text="long job please",
                request_id=request_id,
                idle_timeout=3,
                on_status=on_status,
                abort=gave_up,
                agent="helper",
                token=sub.token,
            )
        )
    except BridgeError as exc:
        error = exc
    elapsed = time.monotonic() - started
    assassin.join(30)
    assert assassin.error is None, repr(assassin.error)
    assert not gave_up.is_set()

    assert error is not None, "the call returned instead of raising BridgeError"
    assert elapsed < 15, f"took {elapsed:.1f}s to give up"
    assert statuses, "no status line before the kill"
    assert request_id in error.message
    assert f"iris bridge recover helper {request_id}" in error.message
    assert "no progress for 3s" in error.message
    assert error.code == "bridge_timeout"
    assert error.request_id == request_id


# -- 3. Iris restarted mid-request; the reply is fetched by hand ----------------------------------


def test_reply_survives_an_iris_restart_via_bridge_recover(
    start_subagent: StartSubAgent, start_iris: StartIris
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "slow job",
                "turns": [[{"thinking": "working"}, {"sleep": 4}, {"text": "late answer"}]],
            }
        ]
    )
    iris = start_iris()
    register(iris, "helper", sub.bridge_url, token=sub.token)

    pending = Background(
        lambda: iris.post(
            "/sessions/r1/message", json_body={"text": "@helper slow job"}, timeout=60
        )
    )
    marker = wait_for(
        lambda: next((e for e in log_entries(iris, "r1") if e.get("type") == "bridge_call"), None),
        20,
        "the bridge_call marker in SESSION-r1/log.jsonl",
    )
    assert marker["agent"] == "helper"
    request_id = marker["requestId"]

    iris.restart()
    pending.join(60)  # it failed or returned; it must not hang

    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    deadline = time.monotonic() + 30
    attempts = []
    while True:
        done = run_iris("bridge", "recover", "helper", request_id, env=env, timeout=60)
        attempts.append(done.returncode)
        if done.returncode != 2 or time.monotonic() > deadline:
            break
        assert "still running" in done.stderr
        time.sleep(0.5)
    assert done.returncode == 0, (attempts, done.stdout, done.stderr)
    assert "late answer" in done.stdout


# -- 4. an old-style sub-agent that ignores Accept ------------------------------------------------


def test_old_style_agent_json_reply_direct_and_through_iris(
    old_agent: OldAgent, start_iris: StartIris
) -> None:
    url = old_agent.url
    reply = call_agent_bridge(BridgeCall(bridge_url=url, text="hello", idle_timeout=10))
    assert reply.text == "old reply"
    assert reply.status == "done"
    first = old_agent.received[0]
    assert first["accept"] == NDJSON  # the client asked for the stream and coped without it
    assert first["body"]["text"] == "hello" and first["body"]["requestId"] == reply.request_id

    iris = start_iris()
    register(iris, "oldie", url)
    answer = iris.post("/sessions/o1/message", json_body={"text": "@oldie hi"}, timeout=30)
    assert answer.status == 200, answer.body
    body = answer.json()
    assert body["text"] == "old reply"
    assert body["status"] == "done"
    assert len(old_agent.received) == 2
    assert old_agent.received[-1]["body"]["text"] == "hi"
    # It ignores the token Iris sends (her API token: none is registered for it).
    assert old_agent.received[-1]["authorization"] == f"Bearer {iris.token}"


# -- 5. an unreachable agent -----------------------------------------------------------------------


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port that refuses connections: bound (so nobody else can listen on it), never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def test_unreachable_agent_fails_promptly_with_route_failed(
    start_iris: StartIris, dead_port: int
) -> None:
    iris = start_iris()
    register(iris, "ghost", f"http://127.0.0.1:{dead_port}")

    started = time.monotonic()
    answer = iris.post("/sessions/g1/message", json_body={"text": "@ghost hi"}, timeout=30)
    elapsed = time.monotonic() - started

    assert elapsed < 10, f"took {elapsed:.1f}s"
    # A failed route is a failed run: HTTP 502, code route_failed, and the run's payload.
    assert answer.status == 502, answer.body
    body = answer.json()
    assert body["code"] == "route_failed"
    assert body["status"] == "failed"
    assert body["error"].startswith(f"ghost is unreachable at http://127.0.0.1:{dead_port}: ")
    assert body["text"] == f"(ghost failed: {body['error']})"
    assert body["runId"]
    # The conversation keeps the attempt: the marker (written before the call) and the failure.
    entries = iris.get("/sessions/g1/history").json()["entries"]
    kinds = [(e["type"], e.get("role")) for e in entries]
    assert kinds == [("message", "user"), ("bridge_call", None), ("message", "assistant")]
    assert entries[1]["agent"] == "ghost"
    assert entries[2]["status"] == "failed" and entries[2]["text"] == body["text"]


# -- 6. a restarted sub-agent marks unfinished jobs as interrupted ---------------------------------


def start_forever_job(sub: SubAgent) -> tuple[requests.Response, str]:
    """A streamed request whose run sleeps for two minutes; its response and request id."""
    response = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "work forever"},
        headers={"Accept": NDJSON, **sub.auth},
        stream=True,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    first = json.loads(next(response.iter_lines()))
    assert first["type"] == "accepted"
    request_id = str(first["requestId"])
    job_log = sub.server.data_dir / "bridge-jobs" / f"{request_id}.jsonl"
    assert job_log.exists()  # logged before the stream began
    return response, request_id


FOREVER = [{"when": "forever", "turns": [[{"thinking": "hmm"}, {"sleep": 120}]]}]


def test_crashed_subagent_marks_unfinished_jobs_interrupted_on_restart(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(rules=FOREVER)
    response, request_id = start_forever_job(sub)
    try:
        kill_hard(sub.server)  # nothing gets to close the job log
    finally:
        response.close()
    job_log = sub.server.data_dir / "bridge-jobs" / f"{request_id}.jsonl"
    assert '"interrupted"' not in job_log.read_text()

    sub.server.start()
    job_url = f"{sub.bridge_url}/bridge/jobs/{request_id}?since=0"

    def finished() -> dict[str, Any] | None:
        job = requests.get(job_url, headers=sub.auth, timeout=10)
        assert job.status_code == 200, job.text
        body: dict[str, Any] = job.json()
        return body if body["done"] else None

    # The restart check runs in the background, so the log is closed shortly after startup.
    body = wait_for(finished, 20, f"job {request_id} to be marked interrupted")
    assert [e["type"] for e in body["events"]] == ["error"], body
    last = body["events"][-1]
    assert last["code"] == "interrupted"
    assert last["requestId"] == request_id
    assert last["seq"] == 1


def test_gracefully_restarted_subagent_ends_unfinished_jobs_with_shutting_down(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(rules=FOREVER)
    response, request_id = start_forever_job(sub)
    try:
        sub.server.restart()  # SIGTERM: the run is cut short, and the log says so
    finally:
        response.close()

    job = requests.get(
        f"{sub.bridge_url}/bridge/jobs/{request_id}?since=0", headers=sub.auth, timeout=10
    )
    assert job.status_code == 200, job.text
    body = job.json()
    assert body["done"] is True, body
    assert [e["type"] for e in body["events"]] == ["error"], body
    last = body["events"][-1]
    assert last["code"] == "shutting_down", body  # not a quiet "final" with status "stopped"
    assert last["requestId"] == request_id

"""Held requests (streams and waits for a model) have slots of their own: at the limit a new one
is refused with 503 and Retry-After at once, creates nothing, and short requests keep answering.
Everything here goes through a served Iris (gunicorn) or a served sub-agent's bridge port."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import requests

from iris_runtime.testing.server import HttpReply, IrisServer
from iris_runtime.testing.subagent import NDJSON, SubAgent
from tests.web.conftest import SSEReader, in_background

Start = Callable[..., IrisServer]
WriteScript = Callable[[list[dict[str, Any]]], Any]
JSON_HEADERS = {"Content-Type": "application/json"}
SLOW = [{"when": "slow", "turns": [[{"thinking": "thinking it over"}, {"sleep": 60}]]}]


def assert_at_capacity(reply: HttpReply | requests.Response, variable: str) -> None:
    status = reply.status if isinstance(reply, HttpReply) else reply.status_code
    body = reply.json()
    assert status == 503, body
    assert reply.headers["Retry-After"] == "5"
    assert body["code"] == "at_capacity"
    assert variable in body["error"]


def test_more_streams_than_threads_leave_health_and_a_turn_served(start_iris: Start) -> None:
    """40 open SSE streams on a server whose short-request pool is 4 threads: /health and a
    message turn are still answered (before, every stream took one of IRIS_THREADS and the rest
    queued without an error)."""
    server = start_iris(IRIS_THREADS="4")
    streams = [SSEReader(server, f"watch{n // 8}") for n in range(40)]
    try:
        assert [s.status for s in streams] == [200] * 40
        assert server.get("/health", auth=False, timeout=10).status == 200
        reply = server.post("/sessions/other/message", json_body={"text": "hi"}, timeout=20)
        assert reply.status == 200 and reply.json()["status"] == "done"
    finally:
        for stream in streams:
            stream.close()


def test_a_stream_over_the_limit_is_refused_at_once_and_its_slot_comes_back(
    start_iris: Start,
) -> None:
    server = start_iris(IRIS_MAX_STREAMS="2", IRIS_SSE_HEARTBEAT_SECONDS="0.2")
    first, second = SSEReader(server, "a"), SSEReader(server, "b")
    assert (first.status, second.status) == (200, 200)
    third = server.get("/sessions/c/stream", timeout=10)  # a hang would time out here
    assert_at_capacity(third, "IRIS_MAX_STREAMS")
    assert server.get("/health", auth=False, timeout=10).status == 200
    assert server.post("/sessions/c/message", json_body={"text": "hi"}, timeout=20).status == 200

    first.close()  # noticed at the next heartbeat write, which frees the slot
    deadline = time.monotonic() + 15
    while True:
        again = SSEReader(server, "c")
        if again.status == 200 or time.monotonic() > deadline:
            break
        again.close()
        time.sleep(0.1)
    assert again.status == 200
    again.close()
    second.close()


def test_a_message_over_the_wait_limit_is_refused_and_never_reaches_the_conversation(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = start_iris(
        IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(write_script(SLOW)), IRIS_MAX_WAITS="1"
    )
    stream = SSEReader(server, "busy")
    pending = in_background(
        lambda: server.post("/sessions/busy/message", json_body={"text": "slow please"})
    )
    stream.wait_for(lambda events: any(e["event"] == "thinking" for e in events))

    refused = server.post("/sessions/other/message", json_body={"text": "hello"}, timeout=10)
    assert_at_capacity(refused, "IRIS_MAX_WAITS")
    assert server.get("/sessions/other/history").json()["entries"] == []
    assert server.get("/health", auth=False, timeout=10).status == 200

    assert server.post("/sessions/busy/stop").json() == {"stopped": True}
    assert pending(15).json()["status"] == "stopped"
    reply = server.post("/sessions/other/message", json_body={"text": "hello"}, timeout=20)
    assert reply.status == 200 and reply.json()["status"] == "done"
    stream.close()


def _bridge(agent: SubAgent, message: str, *, streamed: bool) -> requests.Response:
    return requests.post(
        f"{agent.bridge_url}/bridge",
        json={"text": message, "conversationKey": message.replace(" ", "-")},
        headers={"Accept": NDJSON, **agent.auth} if streamed else agent.auth,
        stream=streamed,
        timeout=30,
    )


def test_the_bridge_refuses_over_its_limits_before_any_job_exists(
    start_subagent: Callable[..., SubAgent],
) -> None:
    # Long enough that the wait slot is surely still held when the second request comes.
    rules = [*SLOW, {"when": "short", "turns": [[{"sleep": 10}, {"text": "done waiting"}]]}]
    agent = start_subagent("helper", rules, IRIS_MAX_STREAMS="1", IRIS_MAX_WAITS="1")
    jobs = agent.server.data_dir / "bridge-jobs"

    held = _bridge(agent, "slow one", streamed=True)
    assert held.status_code == 200
    assert json.loads(next(held.iter_lines()))["type"] == "accepted"
    assert_at_capacity(_bridge(agent, "slow two", streamed=True), "IRIS_MAX_STREAMS")

    waiting = in_background(lambda: _as_reply(_bridge(agent, "short wait", streamed=False)))
    deadline = time.monotonic() + 15
    while len(list(jobs.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # until the plain request holds the one wait slot (its job exists)
    assert len(list(jobs.iterdir())) == 2
    assert_at_capacity(_bridge(agent, "short too", streamed=False), "IRIS_MAX_WAITS")
    assert agent.server.get("/health", auth=False, timeout=10).status == 200

    finished = waiting(30)
    assert finished.status == 200 and finished.json()["text"] == "done waiting"
    assert len(list(jobs.iterdir())) == 2  # the refused requests created no job
    held.close()  # the agent notices at its next heartbeat and frees the stream slot
    deadline = time.monotonic() + 15
    while (again := _bridge(agent, "slow three", streamed=True)).status_code == 503:
        again.close()
        assert time.monotonic() < deadline, "the closed stream's slot never came back"
        time.sleep(0.1)
    assert again.status_code == 200
    again.close()


def _as_reply(response: requests.Response) -> HttpReply:
    return HttpReply(response.status_code, dict(response.headers), response.content)


def test_the_small_thread_stacks_parse_the_deepest_json_and_refuse_deeper(
    start_iris: Start,
) -> None:
    """Server threads have 1 MiB stacks: JSON nested as deep as Python parses (900 levels) is
    parsed, deeper is a 400, and the worker lives on (a C stack overflow would kill it)."""
    server = start_iris()
    deep = b'{"text": "hi", "user": ' + b"[" * 900 + b"]" * 900 + b"}"
    reply = server.post("/sessions/deep/message", body=deep, headers=JSON_HEADERS)
    assert reply.status == 400 and reply.json()["code"] == "invalid_field"
    deeper = b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    reply = server.post("/sessions/deep/message", body=deeper, headers=JSON_HEADERS)
    assert reply.status == 400 and reply.json()["code"] == "malformed_json"
    assert "nested too deeply" in reply.json()["error"]
    assert server.get("/health", auth=False).status == 200
    assert server.post("/sessions/deep/message", json_body={"text": "hi"}).status == 200

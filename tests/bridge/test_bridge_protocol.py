"""The bridge between two real runtimes: wire protocol, job logs, salvage, sessions, routing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import requests

from iris_runtime.testing.server import IrisServer
from iris_runtime.testing.subagent import NDJSON, SubAgent, register
from tests.bridge.conftest import parent_of_helper

StartSub = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]


def test_stream_lines_come_in_order_with_their_fields(start_subagent: StartSub) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "work",
                "turns": [
                    [
                        {"text": "Looking."},
                        {"tool": "bash", "args": {"command": "sleep 0.5; echo hi"}},
                    ],
                    [{"text": "All done."}],
                ],
            }
        ]
    )
    lines = sub.stream({"text": "work please", "requestId": "r-order", "conversationKey": "k1"})
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "accepted" and kinds[-1] == "final"
    assert lines[0] == {"type": "accepted", "requestId": "r-order", "protocol": 1}
    assert "status" in kinds and "heartbeat" in kinds
    status = next(line for line in lines if line["type"] == "status")
    assert status["text"] == "→ running bash" and status["seq"] == 1
    final = lines[-1]
    assert final["text"] == "Looking.\n\nAll done." and final["requestId"] == "r-order"
    assert final["seq"] == 2 and final["status"] == "done"
    assert kinds.count("final") + kinds.count("error") == 1


def test_plain_json_without_the_stream_accept(start_subagent: StartSub) -> None:
    sub = start_subagent()
    response = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "hi", "requestId": "r-plain"},
        headers=sub.auth,
        timeout=30,
    )
    assert response.status_code == 200
    assert response.json() == {"text": "echo: hi", "requestId": "r-plain", "status": "done"}


def test_the_job_log_keeps_events_for_recovery(start_subagent: StartSub) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "job",
                "turns": [[{"tool": "bash", "args": {"command": "true"}}], [{"text": "finished"}]],
            }
        ]
    )
    sub.stream({"text": "job", "requestId": "r-log"})
    everything = requests.get(
        f"{sub.bridge_url}/bridge/jobs/r-log", headers=sub.auth, timeout=10
    ).json()
    assert everything["done"] is True
    assert [e["type"] for e in everything["events"]] == ["status", "final"]
    assert [e["seq"] for e in everything["events"]] == [1, 2]
    later = requests.get(
        f"{sub.bridge_url}/bridge/jobs/r-log?since=1", headers=sub.auth, timeout=10
    ).json()
    assert [e["type"] for e in later["events"]] == ["final"]
    log = sub.server.data_dir / "bridge-jobs" / "r-log.jsonl"
    assert log.stat().st_mode & 0o077 == 0
    assert "heartbeat" not in log.read_text()


def test_a_silent_run_and_a_failing_run_are_both_salvaged(start_subagent: StartSub) -> None:
    sub = start_subagent(
        rules=[
            {"when": "silent", "turns": [[{"tool": "bash", "args": {"command": "true"}}], []]},
            {
                "when": "partial",
                "turns": [
                    [{"text": "half way"}, {"tool": "bash", "args": {"command": "true"}}],
                    [{"error": "model overloaded"}],
                ],
            },
        ]
    )
    silent = sub.stream({"text": "be silent"})[-1]
    assert silent["type"] == "final" and silent["text"].startswith("(no reply")
    assert "→ running" not in silent["text"]
    failed = sub.stream({"text": "partial work"})[-1]
    assert failed["type"] == "final" and failed["status"] == "failed"
    assert "half way" in failed["text"] and "(run failed: model overloaded)" in failed["text"]
    assert "→ running" not in failed["text"]


def test_a_conversation_key_continues_one_session(start_subagent: StartSub) -> None:
    sub = start_subagent(rules=[{"when": "recap", "turns": [[{"recall": True}]]}])
    sub.stream({"text": "first in A", "conversationKey": "slack:C1:1.2"})
    sub.stream({"text": "first in B", "conversationKey": "other"})
    again = sub.stream({"text": "recap", "conversationKey": "slack:C1:1.2"})[-1]
    assert again["text"] == "recall: first in A"
    fresh = sub.stream({"text": "recap", "conversationKey": "brand-new"})[-1]
    assert fresh["text"] == "recall:"


def test_the_bridge_port_serves_only_the_bridge(start_subagent: StartSub) -> None:
    sub = start_subagent()
    bridge, job = f"{sub.bridge_url}/bridge", f"{sub.bridge_url}/bridge/jobs/r-any"
    others = ("GET", "PUT", "PATCH", "DELETE", "OPTIONS")
    for method, url in (
        ("GET", f"{sub.bridge_url}/health"),
        ("GET", f"{sub.bridge_url}/"),
        ("POST", f"{sub.bridge_url}/sessions/a/message"),
        ("POST", f"{bridge}/"),
        *((m, bridge) for m in others),
        *((m, job) for m in ("POST", *others[1:])),
    ):
        response = requests.request(method, url, timeout=10)  # no token needed to get a 404
        assert response.status_code == 404, (method, url)
        assert response.json()["code"] == "not_found", (method, url)
        assert "Allow" not in response.headers, (method, url)
    for url in (bridge, job):  # no body to read, but the same status
        assert requests.head(url, timeout=10).status_code == 404, url
    health = requests.get(f"{sub.server.url}/health", timeout=10).json()
    assert health["agent"] == "helper"
    assert sub.server.port == sub.bridge_port + 100 or sub.bridge_port >= 65400


def test_bad_bridge_input(start_subagent: StartSub) -> None:
    sub = start_subagent(IRIS_MAX_BODY_BYTES="2048")
    url = f"{sub.bridge_url}/bridge"
    cases = [
        (b"{nope", 400, "malformed_json"),
        (b'{"conversationKey": "x"}', 400, "missing_fields"),
        (b'{"text": "hi", "requestId": "../../etc/passwd"}', 400, "invalid_request_id"),
        # Known fields keep their types, even though unknown ones are ignored.
        (b'{"text": 5, "futureField": 1}', 400, "invalid_field"),
        (b'{"text": "hi", "conversationKey": 5}', 400, "invalid_field"),
        (b'{"text": "hi", "origin": ["x"], "futureField": 1}', 400, "invalid_field"),
        (json.dumps({"text": "x" * 5000}).encode(), 413, "payload_too_large"),
    ]
    for body, status, code in cases:
        headers = {"Accept": NDJSON, **sub.auth}
        response = requests.post(url, data=body, headers=headers, timeout=10)
        assert response.status_code == status, body[:40]
        assert response.json()["code"] == code
    sub.stream({"text": "once", "requestId": "dup"})
    reused = requests.post(
        url, json={"text": "twice", "requestId": "dup"}, headers=sub.auth, timeout=10
    )
    assert reused.status_code == 409 and reused.json()["code"] == "request_id_in_use"
    jobs = f"{sub.bridge_url}/bridge/jobs"

    def job(path: str) -> requests.Response:
        return requests.get(f"{jobs}/{path}", headers=sub.auth, timeout=10)

    assert job("dup?since=abc").json()["code"] == "invalid_since"
    assert job("dup?since=-1").status_code == 400
    assert job("unknown-job").status_code == 404
    assert job("..%2F..%2Fetc").status_code == 404  # no such route: the bridge serves two
    assert job("a..b").json()["code"] == "invalid_request_id"  # one segment, but not an id
    assert not list(Path("/").glob("etc/passwd.jsonl"))


def test_unknown_request_fields_are_ignored(start_subagent: StartSub) -> None:
    """A newer Iris may send fields this agent does not know yet: they must not cost a 400."""
    sub = start_subagent()
    future = {"priority": "high", "attachments": [{"url": "x"}], "protocol": 2}
    lines = sub.stream({"text": "hi", "requestId": "r-future", **future})
    assert lines[-1]["type"] == "final" and lines[-1]["text"] == "echo: hi"
    plain = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "plain", "extra": None, **future},
        headers=sub.auth,
        timeout=30,
    )
    assert plain.status_code == 200, plain.text
    assert plain.json()["text"] == "echo: plain"


def test_a_full_conversation_queue_is_an_error_line(start_subagent: StartSub) -> None:
    sub = start_subagent(rules=[{"when": "slow", "turns": [[{"sleep": 3}, {"text": "slow done"}]]}])
    import threading

    results: list[list[dict[str, object]]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(sub.stream({"text": "slow", "conversationKey": "q"}))
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    ends = sorted(
        str(r[-1]["type"]) + ":" + str(r[-1].get("code", r[-1].get("text"))) for r in results
    )
    assert ends.count("error:queue_full") == 2
    assert ends.count("final:slow done") == 6


def test_an_at_mention_goes_straight_to_the_agent(
    start_subagent: StartSub, start_iris: StartIris, tmp_path: Path
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "weather",
                "turns": [
                    [{"tool": "bash", "args": {"command": "sleep 0.3"}}],
                    [{"text": "sunny, 21°C"}],
                ],
            }
        ]
    )
    calls = tmp_path / "iris-model-calls.jsonl"
    iris = parent_of_helper(start_iris, sub, calls)
    from tests.web.conftest import SSEReader

    stream = SSEReader(iris, "m1")
    reply = iris.post("/sessions/m1/message", json_body={"text": "  @helper what's the weather?"})
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "sunny, 21°C"
    assert not calls.exists()  # Iris's own model was never consulted
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    statuses = [e["text"] for e in stream.events if e["event"] == "status"]
    assert "→ asking helper" in statuses and "→ running bash" in statuses
    stream.close()
    log = [
        json.loads(line)
        for line in (iris.data_dir / "SESSION-m1" / "log.jsonl").read_text().splitlines()
    ]
    assert [e["type"] for e in log] == ["message", "bridge_call", "message"]
    assert log[1]["agent"] == "helper" and log[1]["requestId"].startswith("req-")
    # Repeated mentions from the same session continue one sub-agent session.
    sub.rules([{"when": "recap", "turns": [[{"recall": True}]]}])
    again = iris.post("/sessions/m1/message", json_body={"text": "@helper recap"}).json()
    assert again["text"] == "recall: what's the weather?"


def test_unknown_and_mid_message_mentions_fall_through_to_iris(
    start_subagent: StartSub, start_iris: StartIris, tmp_path: Path
) -> None:
    sub = start_subagent()
    calls = tmp_path / "calls.jsonl"
    iris = parent_of_helper(start_iris, sub, calls)
    for text in ("@nobody are you there", "please ask @helper later", "@helpers typo"):
        assert (
            iris.post("/sessions/f1/message", json_body={"text": text}).json()["text"]
            == f"echo: {text}"
        )
    assert len(calls.read_text().splitlines()) == 3


def test_the_model_can_delegate_with_call_agent(
    start_subagent: StartSub, start_iris: StartIris, write_script: Callable[..., Path]
) -> None:
    sub = start_subagent(rules=[{"when": "invoice", "turns": [[{"text": "invoice #42 sent"}]]}])
    script = write_script(
        [
            {
                "when": "bill the client",
                "turns": [
                    [
                        {
                            "tool": "call_agent",
                            "args": {"agent": "helper", "message": "send the invoice"},
                        }
                    ],
                    [{"text": "Done: the helper reports it is sent."}],
                ],
            }
        ]
    )
    iris = start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    register(iris, "helper", sub.bridge_url, token=sub.token)
    from tests.web.conftest import SSEReader

    stream = SSEReader(iris, "d1")
    reply = iris.post("/sessions/d1/message", json_body={"text": "bill the client"}).json()
    assert reply["text"] == "Done: the helper reports it is sent."
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    tool_end = next(e for e in stream.events if e["event"] == "tool" and e["phase"] == "end")
    assert tool_end["result"] == "invoice #42 sent" and tool_end["isError"] is False
    stream.close()


def test_escalation_reaches_the_channel_and_its_log(start_iris: StartIris) -> None:
    iris = start_iris(IRIS_ESCALATION_CHANNEL="ops-alerts")
    register(
        iris, "digest", "http://127.0.0.1:9", "--token-stdin", stdin="digest-own-token-0123456789\n"
    )
    agent_auth = {"Authorization": "Bearer digest-own-token-0123456789"}
    reply = iris.post(
        "/escalate",
        json_body={"text": "disk full, cannot recover", "agent": "iris-itself"},
        headers=agent_auth,
        auth=False,
    )
    assert reply.status == 202, reply.body
    body = reply.json()
    assert body["agent"] == "digest" and body["channel"] == "ops-alerts"  # identity from the token
    log = (iris.data_dir / "ops-alerts" / "log.jsonl").read_text()
    assert "disk full, cannot recover" in log and '"type":"escalation"' in log
    # An agent token reaches only the agent routes.
    assert (
        iris.post(
            "/sessions/x/message", json_body={"text": "hi"}, headers=agent_auth, auth=False
        ).status
        == 403
    )
    assert (
        iris.post(
            "/escalate",
            json_body={"text": "x"},
            headers={"Authorization": "Bearer nope"},
            auth=False,
        ).status
        == 401
    )
    assert iris.post("/escalate", json_body={"text": "x", "channel": "../etc"}).status == 400
    assert iris.post("/escalate", json_body={"nope": 1}).status == 400


def test_stopping_a_routed_turn_returns_promptly(
    start_subagent: StartSub, start_iris: StartIris
) -> None:
    import threading
    import time

    sub = start_subagent(
        rules=[{"when": "long", "turns": [[{"sleep": 60}]]}], IRIS_BRIDGE_HEARTBEAT_MS="30000"
    )
    iris = start_iris()
    register(iris, "helper", sub.bridge_url, token=sub.token)
    box: list[object] = []
    thread = threading.Thread(
        target=lambda: box.append(
            iris.post("/sessions/s9/message", json_body={"text": "@helper long task"})
        )
    )
    thread.start()
    log = iris.data_dir / "SESSION-s9" / "log.jsonl"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (
        not log.exists() or "bridge_call" not in log.read_text()
    ):
        time.sleep(0.05)
    time.sleep(0.3)
    started = time.monotonic()
    assert iris.post("/sessions/s9/stop").json() == {"stopped": True}
    thread.join(10)
    assert box, "the routed message did not return after stop"
    assert time.monotonic() - started < 5  # well before the 30 s heartbeat
    reply = box[0]
    assert reply.status == 200 and reply.json()["status"] == "stopped"  # type: ignore[attr-defined]


def test_the_overall_deadline_ends_a_stream_that_keeps_beating(start_subagent: StartSub) -> None:
    import time

    import pytest

    from iris_runtime.bridge.client import BridgeCall, BridgeError, call_agent_bridge

    sub = start_subagent(rules=[{"when": "forever", "turns": [[{"sleep": 30}]]}])
    started = time.monotonic()
    with pytest.raises(BridgeError) as info:
        call_agent_bridge(
            BridgeCall(
                sub.bridge_url,
                "forever",
                idle_timeout=60,
                deadline=2,
                request_id="r-deadline",
                agent="helper",
                token=sub.token,
            )
        )
    assert time.monotonic() - started < 6
    assert info.value.code == "bridge_timeout"
    assert "r-deadline" in info.value.message and "iris bridge recover helper" in info.value.message

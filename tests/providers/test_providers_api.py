"""Real providers through Iris's API: the real SDKs inside a served Iris, talking to wire-level
fakes of Anthropic and OpenAI on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.fake_llm import (
    FAKE_API_KEY,
    Fail,
    FakeAnthropic,
    FakeOpenAI,
    Reply,
    Stall,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from iris_runtime.testing.server import IrisServer
from tests.web.conftest import SSEReader

Start = Callable[..., IrisServer]
KEY = FAKE_API_KEY


def claude(start_iris: Start, fake: FakeAnthropic, **env: str) -> IrisServer:
    return start_iris(
        **fake.iris_env(),
        IRIS_MODEL="claude-sonnet-5-5",
        IRIS_PROVIDER_MAX_RETRIES="2",
        **env,
    )


def message(iris: IrisServer, session: str, text: str) -> Any:
    return iris.post(f"/sessions/{session}/message", json_body={"text": text})


def test_a_plain_answer_with_usage_and_cost(
    start_iris: Start, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(Reply([Text("Hello from the model."), Usage(1000, 500, cache_read=200)]))
    iris = claude(start_iris, fake_anthropic)
    reply = message(iris, "p1", "hi")
    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["text"] == "Hello from the model."
    assert body["usage"]["inputTokens"] == 1000 and body["usage"]["outputTokens"] == 500
    assert body["usage"]["cacheReadTokens"] == 200
    # claude-sonnet-5-5: $2 in, $10 out, $0.20 cache read per 1M tokens
    assert body["usage"]["costUsd"] == pytest.approx((1000 * 2 + 500 * 10 + 200 * 0.2) / 1e6)
    sent = fake_anthropic.requests[-1]["body"]
    assert sent["model"] == "claude-sonnet-5-5" and sent["stream"] is True
    assert any(t["name"] == "bash" for t in sent["tools"])


def test_a_tool_using_turn(start_iris: Start, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(
        Reply(
            [Text("Let me check."), ToolCall("bash", {"command": "echo $((40 + 2))"}, id="toolu_1")]
        ),
        Reply([Text("The answer is 42.")]),
    )
    iris = claude(start_iris, fake_anthropic)
    reply = message(iris, "t1", "what is 40 + 2? use bash")
    assert reply.json()["text"] == "Let me check.\n\nThe answer is 42."
    second = fake_anthropic.requests[-1]["body"]["messages"]
    results = [
        block
        for m in second
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]
    assert results and results[0]["tool_use_id"] == "toolu_1"
    assert "42" in json.dumps(results[0]["content"])


def test_thinking_reaches_the_stream(start_iris: Start, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(Reply([Thinking("weighing the options"), Text("Decided.")]))
    iris = claude(start_iris, fake_anthropic)
    stream = SSEReader(iris, "th1")
    assert message(iris, "th1", "decide").json()["text"] == "Decided."
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    thinking = "".join(e["text"] for e in stream.events if e["event"] == "thinking")
    assert thinking == "weighing the options"
    stream.close()


def test_a_429_is_retried_and_the_wait_is_shown(
    start_iris: Start, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Fail(429, "rate_limit_error", "Number of requests exceeded", retry_after=0.3),
        Reply([Text("through on the second try")]),
    )
    iris = claude(start_iris, fake_anthropic)
    stream = SSEReader(iris, "r1")
    assert message(iris, "r1", "hello").json()["text"] == "through on the second try"
    assert len(fake_anthropic.requests) == 2
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    assert any("retrying" in e.get("text", "") for e in stream.events if e["event"] == "status")
    stream.close()


def test_overloaded_exhaustion_is_reported(
    start_iris: Start, fake_anthropic: FakeAnthropic
) -> None:
    for _ in range(3):
        fake_anthropic.enqueue(Fail(529, "overloaded_error", "Overloaded", retry_after=0.1))
    iris = claude(start_iris, fake_anthropic)
    reply = message(iris, "o1", "hello")
    assert reply.status == 502
    body = reply.json()
    assert body["code"] == "run_failed" and "overloaded" in body["text"].lower()
    assert body["text"].startswith("(run failed:")
    assert len(fake_anthropic.requests) == 3  # one try and IRIS_PROVIDER_MAX_RETRIES=2 retries


def test_stop_aborts_a_stalled_stream_promptly(
    start_iris: Start, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([Text("partial words"), Thinking("still going"), Stall(60), Text(" never")])
    )
    iris = claude(start_iris, fake_anthropic)
    stream = SSEReader(iris, "a1")
    box: list[Any] = []
    caller = threading.Thread(target=lambda: box.append(message(iris, "a1", "long task")))
    caller.start()
    stream.wait_for(lambda evs: any(e["event"] == "thinking" for e in evs))
    started = time.monotonic()
    assert iris.post("/sessions/a1/stop").json() == {"stopped": True}
    caller.join(15)
    assert box, "the message call never returned"
    assert time.monotonic() - started < 10
    body = box[0].json()
    assert body["status"] == "stopped" and body["text"] == "partial words"
    stream.close()


def test_a_missing_key_names_the_variable(start_iris: Start, fake_anthropic: FakeAnthropic) -> None:
    iris = start_iris(IRIS_PROVIDER="anthropic", ANTHROPIC_BASE_URL=fake_anthropic.base_url)
    reply = message(iris, "k1", "hello")
    assert reply.status == 502
    assert "ANTHROPIC_API_KEY" in reply.json()["text"]
    assert fake_anthropic.requests == []
    assert "Traceback" not in iris.log_tail(200)


def test_a_wrong_key_is_a_clear_error_not_a_retry(
    start_iris: Start, fake_anthropic: FakeAnthropic
) -> None:
    iris = start_iris(
        IRIS_PROVIDER="anthropic",
        ANTHROPIC_API_KEY="wrong-key",
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
    )
    reply = message(iris, "k2", "hello")
    assert reply.status == 502 and "ANTHROPIC_API_KEY" in reply.json()["text"]
    assert len(fake_anthropic.requests) == 1
    assert "wrong-key" not in iris.log_tail(400)


def test_compaction_on_a_small_window_keeps_history(
    start_iris: Start, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    data = tmp_path / "data-small"
    data.mkdir()
    (data / "models.yaml").write_text(
        "models:\n  tiny-claude:\n    provider: anthropic\n    context_window: 6000\n"
        "    max_output_tokens: 1000\n    price: {input: 1, output: 1}\n"
    )
    iris = start_iris(data, **fake_anthropic.iris_env(), IRIS_MODEL="tiny-claude")
    for number in range(6):
        fake_anthropic.enqueue(Reply([Text(f"noted {number}")]))
        fake_anthropic.enqueue(Reply([Text("SUMMARY of earlier facts")]))  # used if it compacts
        message(iris, "c1", f"fact {number}: " + "lorem ipsum " * 300)
        if any(
            "compress" in json.dumps(r["body"].get("system", "")) for r in fake_anthropic.requests
        ):
            break
    summaries = [
        r for r in fake_anthropic.requests if "compress" in json.dumps(r["body"].get("system", ""))
    ]
    assert summaries, "no compaction request was sent"
    history = iris.get("/sessions/c1/history?all=1").json()["entries"]
    assert sum(1 for e in history if e["type"] == "message" and e["role"] == "user") >= 2
    assert any(e["type"] == "compaction" for e in history)


def test_openai_against_a_picky_local_server(start_iris: Start) -> None:
    with FakeOpenAI(api_key=KEY, strict_local=True) as fake:
        fake.enqueue(
            Reply([ToolCall("bash", {"command": "echo local"})]), Reply([Text("local says hi")])
        )
        iris = start_iris(
            IRIS_PROVIDER="openai",
            OPENAI_API_KEY=KEY,
            OPENAI_BASE_URL=fake.base_url,
            IRIS_MODEL="llama3.1:8b",
        )
        reply = message(iris, "l1", "say hi")
        assert reply.status == 200, reply.body
        assert reply.json()["text"] == "local says hi"
        first = fake.requests[0]["body"]
        assert "max_tokens" in first and "max_completion_tokens" not in first
        assert all(m["role"] != "developer" for m in first["messages"])
        assert all("strict" not in t.get("function", {}) for t in first.get("tools", []))


def test_openai_official_shape(start_iris: Start, fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Reply([Text("official hello"), Usage(2000, 100)]))
    iris = start_iris(
        IRIS_PROVIDER="openai",
        OPENAI_API_KEY=KEY,
        IRIS_OPENAI_BASE_URL=fake_openai.base_url,
        IRIS_MODEL="gpt-4.1-mini",
    )
    body = message(iris, "oa1", "hello").json()
    assert body["text"] == "official hello"
    assert body["usage"]["costUsd"] == pytest.approx((2000 * 0.4 + 100 * 1.6) / 1e6)
    assert fake_openai.requests[0]["body"]["stream_options"] == {"include_usage": True}


def test_an_unknown_model_stops_serve_and_doctor_says_why(tmp_path: Path) -> None:
    from iris_runtime.testing.server import clean_environment, free_port, run_iris

    env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "d"),
        IRIS_PROVIDER="openai",
        IRIS_MODEL="gpt-nonexistent",
        IRIS_API_PORT=str(free_port()),
    )
    served = run_iris("serve", env=env, timeout=60)
    assert served.returncode != 0
    assert "unknown model 'gpt-nonexistent'" in served.stderr and "Traceback" not in served.stderr
    doctor = run_iris("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["model"]["status"] == "fail" and checks["api_key"]["status"] == "warn"

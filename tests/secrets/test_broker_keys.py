"""A sub-agent in ``store`` mode holds no LLM key: its provider fetches the key from the
parent's broker with the agent's own token, and a refusal is a clear provider error."""

from __future__ import annotations

import json
import secrets as random
from collections.abc import Callable
from pathlib import Path

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.engine.provider import ProviderError
from iris_runtime.testing.fake_llm import FAKE_API_KEY, FakeAnthropic, Reply, Text
from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from tests.providers.common import claude, collect, text_of


def parent_with_key(start_iris: Callable[..., IrisServer]) -> IrisServer:
    parent = start_iris()
    assert (
        parent.request(
            "PUT", "/secrets/ANTHROPIC_API_KEY", json_body={"value": FAKE_API_KEY}
        ).status
        == 200
    )
    return parent


def register(parent: IrisServer, name: str, secrets: list[str]) -> str:
    token = f"{name}-" + random.token_urlsafe(24)
    AgentRegistry(parent.data_dir / "agents.json").register(
        name, "http://127.0.0.1:4100", secrets, token
    )
    return token


def as_subagent(parent_url: str, token: str) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": "",
        "IRIS_SECRET_BROKER_URL": parent_url,
        "IRIS_API_TOKEN": token,
        "IRIS_SECRETS_MODE": "store",
    }


def test_the_llm_key_comes_from_the_broker(
    tmp_path: Path, fake_anthropic: FakeAnthropic, start_iris: Callable[..., IrisServer]
) -> None:
    parent = parent_with_key(start_iris)
    token = register(parent, "helper", ["ANTHROPIC_API_KEY"])
    fake_anthropic.enqueue(Reply([Text("hello from claude")]))
    provider = claude(tmp_path, fake_anthropic, **as_subagent(parent.url, token))
    assert text_of(collect(provider)) == "hello from claude"
    audit = (parent.data_dir / "audit" / "secrets.jsonl").read_text()
    assert '"caller": "helper"' in audit and FAKE_API_KEY not in audit


def test_a_key_not_on_the_allow_list_is_a_clear_non_retryable_error(
    tmp_path: Path, fake_anthropic: FakeAnthropic, start_iris: Callable[..., IrisServer]
) -> None:
    parent = parent_with_key(start_iris)
    token = register(parent, "stranger", ["SOMETHING_ELSE"])
    events = collect(claude(tmp_path, fake_anthropic, **as_subagent(parent.url, token)))
    errors = [e for e in events if isinstance(e, ProviderError)]
    assert len(errors) == 1 and not errors[0].retryable
    assert "allow-list" in errors[0].message
    assert fake_anthropic.requests == []


def test_an_unreachable_broker_is_a_retryable_error(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    events = collect(claude(tmp_path, fake_anthropic, **as_subagent(dead, "t" * 32)))
    errors = [e for e in events if isinstance(e, ProviderError)]
    assert len(errors) == 1 and errors[0].retryable
    assert "unreachable" in errors[0].message


def test_doctor_checks_a_subagents_key_at_the_broker(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    parent = parent_with_key(start_iris)
    allowed = register(parent, "helper", ["ANTHROPIC_API_KEY"])
    denied = register(parent, "stranger", [])

    def api_key_check(token: str) -> dict[str, str]:
        env = clean_environment(
            IRIS_DATA_DIR=str(tmp_path / "sub"),
            IRIS_PROVIDER="anthropic",
            **as_subagent(parent.url, token),
        )
        result = run_iris("doctor", "--json", env=env)
        assert FAKE_API_KEY not in result.stdout + result.stderr
        checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
        return checks["api_key"]

    ok = api_key_check(allowed)
    assert ok["status"] == "ok" and "from the secret broker" in ok["detail"]
    refused = api_key_check(denied)
    assert refused["status"] == "fail" and "allow-list" in refused["detail"]


def test_a_served_subagent_answers_with_a_key_it_got_from_the_broker(
    tmp_path: Path, fake_anthropic: FakeAnthropic, start_iris: Callable[..., IrisServer]
) -> None:
    """End to end: Iris routes ``@helper`` over the bridge; the sub-agent, started with no LLM
    key at all, fetches it from Iris's broker with its own token and answers."""
    parent = parent_with_key(start_iris)
    token = "helper-" + random.token_urlsafe(24)
    bridge_port = free_port()
    AgentRegistry(parent.data_dir / "agents.json").register(
        "helper", f"http://127.0.0.1:{bridge_port}", ["ANTHROPIC_API_KEY"], token
    )
    helper = IrisServer(
        tmp_path / "helper-data",
        token=token,
        env={
            "AGENT_NAME": "helper",
            "BRIDGE_PORT": str(bridge_port),
            "IRIS_PROVIDER": "anthropic",
            "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
            **as_subagent(parent.url, token),
        },
    )
    try:
        helper.start()
        assert "ANTHROPIC_API_KEY=" not in " ".join(
            f"{k}={v}" for k, v in helper.environment().items() if v
        )
        fake_anthropic.enqueue(Reply([Text("the helper answers")]))
        reply = parent.post("/sessions/broker-e2e/message", json_body={"text": "@helper hi"})
        assert reply.status == 200, reply.body
        assert reply.json()["text"] == "the helper answers"
    finally:
        helper.stop()
    audit = (parent.data_dir / "audit" / "secrets.jsonl").read_text()
    assert '"caller": "helper", "action": "read", "name": "ANTHROPIC_API_KEY"' in audit

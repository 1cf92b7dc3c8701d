"""A served Iris on the wire-level Anthropic fake, answering through :mod:`.model`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer
from tests.session_agents import model

Start = Callable[..., IrisServer]


@pytest.fixture
def llm() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        fake.respond_with(model.respond)
        yield fake


@pytest.fixture
def serve(start_iris: Start, llm: FakeAnthropic, tmp_path: Path) -> Callable[..., IrisServer]:
    """``serve(config=None, **env)``: Iris on the fake, with session-agents.json if given."""

    def start(config: dict[str, Any] | None = None, **env: str) -> IrisServer:
        data = tmp_path / "data"
        data.mkdir(exist_ok=True)
        if config is not None:
            (data / "session-agents.json").write_text(json.dumps(config))
        return start_iris(
            data,
            **llm.iris_env(),
            IRIS_MODEL="claude-sonnet-5-5",
            IRIS_PROVIDER_MAX_RETRIES="0",
            **env,
        )

    return start


def say(iris: IrisServer, session: str, text: str) -> dict[str, Any]:
    reply = iris.post(f"/sessions/{session}/message", json_body={"text": text})
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


def spawn(iris: IrisServer, session: str, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    """Have the main agent call sessions_spawn once per ``calls``; the tools' results."""
    text = say(iris, session, "spawn " + json.dumps(list(calls)))["text"]
    assert text.startswith("spawned: "), text
    return [json.loads(part) for part in text[len("spawned: ") :].split(" | ")]


def announces(iris: IrisServer, session: str) -> list[dict[str, Any]]:
    reply = iris.get(f"/sessions/{session}/history")
    assert reply.status == 200, reply.body
    return [e for e in reply.json()["entries"] if e.get("announce")]


def wait_for_announces(
    iris: IrisServer, session: str, count: int, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        found = announces(iris, session)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{len(found)} of {count} announces after {timeout}s: {found}")


def subagents(iris: IrisServer, session: str, **query: str) -> list[dict[str, Any]]:
    path = f"/sessions/{session}/subagents"
    if query:
        path += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    reply = iris.get(path)
    assert reply.status == 200, reply.body
    listed: list[dict[str, Any]] = reply.json()["subagents"]
    return listed


def wait_for_status(
    iris: IrisServer,
    session: str,
    statuses: set[str],
    *,
    count: dict[str, int] | None = None,
    timeout: float = 30,
) -> list[dict[str, Any]]:
    """Wait until every sub-agent of the session has one of ``statuses`` (and, with ``count``,
    at least that many have each given status)."""
    deadline = time.monotonic() + timeout
    listed: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        listed = subagents(iris, session)
        shown = [s["status"] for s in listed]
        if (
            listed
            and all(s in statuses for s in shown)
            and all(shown.count(k) >= n for k, n in (count or {}).items())
        ):
            return listed
        time.sleep(0.05)
    raise AssertionError(f"statuses never settled: {[s['status'] for s in listed]}")


def call_tool(
    iris: IrisServer,
    fake: FakeAnthropic,
    session: str,
    name: str,
    args: dict[str, Any] | None = None,
) -> Any:
    """Have the main agent call one tool; its JSON result."""
    text = f"call {name} {json.dumps(args or {})}"
    reply = say(iris, session, text)["text"]
    assert reply.startswith("spawned: "), reply
    return json.loads(reply[len("spawned: ") :])

"""Fixtures for the Telegram tests (helpers in ``telegram_harness``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram_harness import SubAgent, TelegramIris, start_telegram_iris

from iris_runtime.testing.fake_telegram import FakeTelegram
from iris_runtime.testing.server import IrisServer, free_port


@pytest.fixture
def telegram_iris(
    tmp_path: Path, fake_telegram: FakeTelegram
) -> Iterator[Callable[..., TelegramIris]]:
    """``start(rules=None, **env)``: a served Iris polling ``fake_telegram``."""
    started: list[IrisServer] = []

    def start(rules: list[dict[str, Any]] | None = None, **env: str) -> TelegramIris:
        iris = start_telegram_iris(tmp_path / f"iris{len(started)}", fake_telegram, rules, **env)
        started.append(iris.server)
        return iris

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def shared_telegram_iris(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TelegramIris]:
    """One fake Bot API and one served Iris for a whole module (tests use their own chats)."""
    with FakeTelegram() as fake:
        iris = start_telegram_iris(tmp_path_factory.mktemp("telegram"), fake)
        try:
            yield iris
        finally:
            iris.server.stop()
        assert fake.errors == [], fake.errors


@pytest.fixture
def start_subagent(tmp_path: Path) -> Iterator[Callable[..., SubAgent]]:
    """A real sub-agent runtime (``iris serve`` with ``AGENT_NAME`` and ``BRIDGE_PORT``) on the
    scripted provider. It gets no Telegram token: a bridge-only agent needs none."""
    started: list[IrisServer] = []

    def start(name: str, rules: list[dict[str, Any]]) -> SubAgent:
        bridge_port = free_port()
        script = tmp_path / f"{name}-script.json"
        script.write_text(json.dumps({"rules": rules}))
        server = IrisServer(
            tmp_path / f"{name}-data",
            port=bridge_port + 100 if bridge_port < 65400 else free_port(),
            env={
                "AGENT_NAME": name,
                "BRIDGE_PORT": str(bridge_port),
                "IRIS_PROVIDER": "scripted",
                "IRIS_SCRIPT_FILE": str(script),
                "TELEGRAM_BOT_TOKEN": "",
            },
        )
        started.append(server)
        server.start()
        return SubAgent(name, server, bridge_port, script)

    yield start
    for server in started:
        server.stop()

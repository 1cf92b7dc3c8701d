"""Fixtures for the Telegram tests (helpers in ``telegram_harness``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram_harness import TelegramIris, start_telegram_iris

from iris_runtime.testing.fake_telegram import FakeTelegram
from iris_runtime.testing.server import IrisServer


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

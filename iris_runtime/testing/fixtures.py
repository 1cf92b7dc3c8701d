"""pytest fixtures for Iris, loaded through the ``pytest11`` entry point.

``iris_server`` is a running ``iris serve`` with a temp data dir (offline provider);
``start_iris(**env)`` starts more, with extra environment (e.g. ``IRIS_PROVIDER="scripted"``);
``fake_anthropic`` / ``fake_openai`` are wire-level fakes of those APIs for the real SDKs.
``openbao`` is a real OpenBao dev server shared by the session; ``vault_env`` /
``vault_settings`` point Iris at it under a path prefix of the test's own.
``fake_slack`` / ``fake_telegram`` are wire-level fakes of the Slack Web API (with Socket Mode)
and the Telegram Bot API for the transport plugins.
``start_subagent`` starts real sub-agent runtimes on the scripted provider.
``socket_dir`` is a folder with a path short enough for unix sockets (a reach socket, say).
Every server started is stopped at teardown.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.config import Settings
from iris_runtime.testing.fake_llm import FakeAnthropic, FakeOpenAI
from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.fake_telegram import FakeTelegram
from iris_runtime.testing.openbao import OpenBaoDev, OpenBaoError, find_bao
from iris_runtime.testing.server import IrisServer
from iris_runtime.testing.subagent import SubAgent, SubAgents


@pytest.fixture
def start_iris(tmp_path: Path) -> Iterator[Callable[..., IrisServer]]:
    started: list[IrisServer] = []

    def start(data_dir: Path | None = None, **env: str) -> IrisServer:
        server = IrisServer(data_dir or tmp_path / f"data{len(started)}", env=env)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def start_subagent(tmp_path: Path) -> Iterator[Callable[..., SubAgent]]:
    """``start_subagent(name, rules, **env)``: a real sub-agent runtime on the scripted provider
    (bridge port free, API at bridge port + 100); all are stopped at teardown."""
    agents = SubAgents(tmp_path)
    yield agents.start
    agents.stop_all()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A fresh folder with a short path, for unix sockets (a socket path may be at most 107
    bytes, which pytest's tmp paths can exceed); removed at teardown."""
    made = Path(tempfile.mkdtemp(prefix="iris-sock-"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def iris_server(start_iris: Callable[..., IrisServer]) -> IrisServer:
    return start_iris()


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A wire-level fake of the Anthropic Messages API on loopback (key ``FAKE_API_KEY``)."""
    with FakeAnthropic() as fake:
        yield fake
    assert fake.errors == [], fake.errors  # a crash inside the fake is a test failure


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A wire-level fake of the OpenAI Chat Completions API on loopback (key ``FAKE_API_KEY``)."""
    with FakeOpenAI() as fake:
        yield fake
    assert fake.errors == [], fake.errors


@pytest.fixture(scope="module")
def shared_iris_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrisServer]:
    """One server for a whole test module, for tests that do not care about each other's data."""
    server = IrisServer(tmp_path_factory.mktemp("iris") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[list[dict[str, Any]]], Path]:
    """Write a scripted-provider script; pass the path as ``IRIS_SCRIPT_FILE``."""
    path = tmp_path / "script.json"

    def write(rules: list[dict[str, Any]]) -> Path:
        path.write_text(json.dumps({"rules": rules}))
        return path

    return write


@pytest.fixture(scope="session")
def openbao() -> Iterator[OpenBaoDev]:
    """A real OpenBao dev server for the whole session (KV v2 at ``secret/``).

    A missing ``bao`` binary fails the test rather than skipping it: a skipped Vault suite
    looks green while testing nothing.
    """
    try:
        bao = find_bao()
    except OpenBaoError as exc:
        pytest.fail(str(exc), pytrace=False)
    with OpenBaoDev(bao) as server:
        yield server


@pytest.fixture
def vault_env(openbao: OpenBaoDev) -> dict[str, str]:
    """Environment selecting the Vault backend on ``openbao`` (root token), with a path
    prefix unique to this test so tests never see each other's secrets."""
    return {
        "IRIS_SECRET_BACKEND": "vault",
        "IRIS_VAULT_ADDR": openbao.addr,
        "IRIS_VAULT_TOKEN": openbao.root_token,
        "IRIS_VAULT_MOUNT": "secret",
        "IRIS_VAULT_PREFIX": f"iris-test-{uuid.uuid4().hex[:12]}",
    }


@pytest.fixture
def vault_settings(vault_env: dict[str, str], tmp_path: Path) -> Settings:
    """``Settings`` built from ``vault_env`` with a temp data dir."""
    return Settings.from_env({**vault_env, "IRIS_DATA_DIR": str(tmp_path / "data")})


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    """A wire-level fake of the Telegram Bot API on loopback: point a client at
    ``fake_telegram.api_url`` with ``fake_telegram.token`` (Iris: ``IRIS_TELEGRAM_API_URL`` and
    ``TELEGRAM_BOT_TOKEN``)."""
    with FakeTelegram() as fake:
        yield fake
    assert fake.errors == [], fake.errors  # a crash inside the fake is a test failure


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A wire-level fake of Slack (Web API and Socket Mode) on loopback: point ``slack_sdk`` at
    ``fake_slack.api_url``; ``fake_slack.iris_env()`` is the environment for an Iris with the
    Slack plugin (``IRIS_SLACK_APP_TOKEN``, ``IRIS_SLACK_BOT_TOKEN``, ``IRIS_SLACK_API_URL``)."""
    with FakeSlack() as fake:
        yield fake
    assert fake.errors == [], fake.errors  # a crash inside the fake is a test failure

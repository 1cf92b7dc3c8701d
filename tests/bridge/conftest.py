"""Two real runtimes: a sub-agent (``iris serve --agent``) and Iris with it registered."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import SubAgent, SubAgents
from tests.bridge.fault_tools import CuttingProxy, OldAgent


@pytest.fixture
def start_subagent(tmp_path: Path) -> Iterator[Callable[..., SubAgent]]:
    agents = SubAgents(tmp_path)
    yield agents.start
    agents.stop_all()


def register(
    iris: IrisServer,
    agent: str,
    url: str,
    *extra: str,
    stdin: str | None = None,
    token: str | None = None,
) -> None:
    """``iris agents register`` against Iris's data dir, through the real CLI; ``token`` is the
    agent's own (sent on stdin, never in argv), else Iris uses her API token with it."""
    if token is not None:
        extra, stdin = (*extra, "--token-stdin"), token + "\n"
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    done = run_iris("agents", "register", agent, url, *extra, env=env, stdin=stdin, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def cutting_proxy() -> Iterator[Callable[[int], CuttingProxy]]:
    proxies: list[CuttingProxy] = []

    def start(upstream_port: int) -> CuttingProxy:
        proxies.append(CuttingProxy(upstream_port))
        return proxies[-1]

    yield start
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def old_agent() -> Iterator[OldAgent]:
    server = OldAgent()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)

"""Two real runtimes: a sub-agent (``iris serve --agent``) and Iris with it registered."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from iris_runtime.testing.subagent import SubAgent, SubAgents, register
from tests.bridge.fault_tools import CuttingProxy, OldAgent


@pytest.fixture
def start_subagent(tmp_path: Path) -> Iterator[Callable[..., SubAgent]]:
    agents = SubAgents(tmp_path)
    yield agents.start
    agents.stop_all()


def parent_of_helper(
    start_iris: Callable[..., IrisServer], sub: SubAgent, calls: Path
) -> IrisServer:
    """Iris with ``sub`` registered as ``helper``. Her own model is scripted without rules (the
    script file next to ``calls`` is never written) and records every call it gets in ``calls``,
    so a test can tell whether she consulted it."""
    iris = start_iris(
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(calls.with_name("none.json")),
        IRIS_SCRIPT_CALLS_FILE=str(calls),
    )
    register(iris, "helper", sub.bridge_url, token=sub.token)
    return iris


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

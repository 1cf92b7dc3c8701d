"""Two real runtimes: a sub-agent (``iris serve --agent``) and Iris with it registered."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from tests.bridge.fault_tools import CuttingProxy, OldAgent

NDJSON = "application/x-ndjson"


@dataclass
class SubAgent:
    name: str
    server: IrisServer
    bridge_port: int
    script: Path

    @property
    def bridge_url(self) -> str:
        return f"http://127.0.0.1:{self.bridge_port}"

    def rules(self, rules: list[dict[str, Any]]) -> None:
        self.script.write_text(json.dumps({"rules": rules}))

    def stream(self, body: dict[str, Any], timeout: float = 30) -> list[dict[str, Any]]:
        """POST /bridge asking for the stream; every line, parsed."""
        response = requests.post(
            f"{self.bridge_url}/bridge",
            json=body,
            headers={"Accept": NDJSON},
            stream=True,
            timeout=timeout,
        )
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith(NDJSON)
        assert response.headers["X-Accel-Buffering"] == "no"
        return [json.loads(line) for line in response.iter_lines() if line]


@pytest.fixture
def start_subagent(tmp_path: Path) -> Iterator[Callable[..., SubAgent]]:
    started: list[IrisServer] = []

    def start(
        name: str = "helper", rules: list[dict[str, Any]] | None = None, **env: str
    ) -> SubAgent:
        bridge_port = free_port()
        script = tmp_path / f"{name}-script.json"
        script.write_text(json.dumps({"rules": rules or []}))
        server = IrisServer(
            tmp_path / f"{name}-data",
            port=bridge_port + 100 if bridge_port < 65400 else free_port(),
            env={
                "AGENT_NAME": name,
                "BRIDGE_PORT": str(bridge_port),
                "IRIS_PROVIDER": "scripted",
                "IRIS_SCRIPT_FILE": str(script),
                "IRIS_BRIDGE_HEARTBEAT_MS": "200",
                **env,
            },
        )
        started.append(server)
        server.start()
        return SubAgent(name, server, bridge_port, script)

    yield start
    for server in started:
        server.stop()


def register(iris: IrisServer, agent: str, url: str, *extra: str, stdin: str | None = None) -> None:
    """``iris agents register`` against Iris's data dir, through the real CLI."""
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    if stdin is None:
        done = run_iris("agents", "register", agent, url, *extra, env=env)
    else:
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, "-m", "iris_runtime", "agents", "register", agent, url, *extra],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
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

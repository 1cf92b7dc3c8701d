"""A real sub-agent runtime for tests: ``iris serve`` with ``AGENT_NAME`` and ``BRIDGE_PORT`` on
the scripted provider, whose rules a test can rewrite between turns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris

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

    @property
    def token(self) -> str:
        """Its own API token: the one its bridge asks for (random per agent unless given)."""
        return self.server.token

    @property
    def auth(self) -> dict[str, str]:
        """The header a caller of its bridge sends."""
        return {"Authorization": f"Bearer {self.token}"}

    def rules(self, rules: list[dict[str, Any]]) -> None:
        self.script.write_text(json.dumps({"rules": rules}))

    def stream(self, body: dict[str, Any], timeout: float = 30) -> list[dict[str, Any]]:
        """``POST /bridge`` asking for the NDJSON stream; every line, parsed (the stream's
        headers are checked on the way)."""
        response = requests.post(
            f"{self.bridge_url}/bridge",
            json=body,
            headers={"Accept": NDJSON, **self.auth},
            stream=True,
            timeout=timeout,
        )
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith(NDJSON)
        assert response.headers["X-Accel-Buffering"] == "no"
        return [json.loads(line) for line in response.iter_lines() if line]


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


class SubAgents:
    """Starts sub-agents under ``folder``; ``stop_all`` ends every one it started."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[IrisServer] = []

    def start(
        self,
        name: str = "helper",
        rules: list[dict[str, Any]] | None = None,
        *,
        token: str | None = None,
        **env: str,
    ) -> SubAgent:
        """``token`` is its API token (e.g. Iris's own, to share it); by default its own."""
        bridge_port = free_port()
        script = self.folder / f"{name}-script.json"
        script.write_text(json.dumps({"rules": rules or []}))
        server = IrisServer(
            self.folder / f"{name}-data",
            # The API (and /health) sits at bridge port + 100, as a spawned agent's does.
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
        if token:
            server.token = token
        self.started.append(server)
        server.start()
        return SubAgent(name, server, bridge_port, script)

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()

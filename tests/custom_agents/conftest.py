"""Served Iris with custom agents: manifests, a real relay agent process, the reach socket."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.custom_agents.reach_client import ReachConnection
from iris_runtime.testing.relay_agent import RelayAgent
from iris_runtime.testing.server import IrisServer, free_port
from tests.bridge.fault_tools import wait_for

HERE = Path(__file__).parent
StartIris = Callable[..., IrisServer]


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    """The first truthy value of ``predicate`` (fails the test if none comes)."""
    return wait_for(predicate, timeout, "the condition")


def write_manifest(directory: Path, name: str, manifest: dict[str, Any] | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    path.write_text(text)
    return path


def relay_manifest(kind: str, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "label": kind.title(),
        "relay": f"http://127.0.0.1:{port}/inbound",
        **extra,
    }


@dataclass
class Setup:
    """One served Iris, its agents.d and its reach socket (on a short path: unix socket paths
    are limited to 107 bytes, which pytest's tmp paths can exceed)."""

    start_iris: StartIris
    tmp_path: Path
    socket_dir: Path
    agents: list[RelayAgent] = field(default_factory=list)
    iris: IrisServer | None = None

    @property
    def data_dir(self) -> Path:
        return self.tmp_path / "data"

    @property
    def agents_d(self) -> Path:
        return self.data_dir / "agents.d"

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / "reach.sock"

    def relay(self, kind: str = "butler", **extra: Any) -> RelayAgent:
        """A running relay agent with its manifest in agents.d."""
        agent = RelayAgent(free_port(), self.socket_path, self.tmp_path / f"{kind}.jsonl")
        self.agents.append(agent.start())
        write_manifest(self.agents_d, f"{kind}.json", relay_manifest(kind, agent.port, **extra))
        return agent

    def serve(self, **env: str) -> IrisServer:
        self.iris = self.start_iris(
            self.data_dir,
            IRIS_REACH_SOCKET=str(self.socket_path),
            IRIS_CUSTOM_AGENTS_POLL_MS="100",
            **env,
        )
        return self.iris

    def inner_iris(self, rules: list[Any], **env: str) -> tuple[IrisServer, str]:
        """Another Iris that serves as a relay agent (scripted by ``rules``): it and the URL
        of its inbound listener, for this Iris's manifest."""
        script = self.tmp_path / "inner-script.json"
        script.write_text(json.dumps({"rules": rules}))
        port = free_port()
        inner = self.start_iris(
            self.tmp_path / "inner",
            IRIS_PROVIDER="scripted",
            IRIS_SCRIPT_FILE=str(script),
            IRIS_REACH_SOCKET=str(self.socket_dir / "inner.sock"),
            IRIS_RELAY_INBOUND_PORT=str(port),
            **env,
        )
        url = (inner.data_dir / "custom-agents" / "relay-inbound-url").read_text().strip()
        assert url.startswith(f"http://127.0.0.1:{port}/")
        return inner, url

    def reach(self) -> ReachConnection:
        return ReachConnection(self.socket_path)

    def reach_raw(self, payload: bytes) -> list[dict[str, Any]]:
        """Send raw bytes on one reach connection (past the client, which would refuse to
        write them); every reply line up to the close."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.socket_path))
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return [json.loads(line) for line in data.splitlines()]

    def ask(self, session: str, text: str) -> Any:
        assert self.iris is not None
        return self.iris.post(f"/sessions/{session}/message", json_body={"text": text})

    def custom_agents(self) -> dict[str, Any]:
        assert self.iris is not None
        reply = self.iris.get("/custom-agents")
        assert reply.status == 200, reply.body
        listing: dict[str, Any] = reply.json()
        return listing


@pytest.fixture
def setup(start_iris: StartIris, tmp_path: Path, socket_dir: Path) -> Iterator[Setup]:
    made = Setup(start_iris, tmp_path, socket_dir)
    yield made
    for agent in made.agents:
        agent.stop()

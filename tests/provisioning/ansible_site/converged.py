"""The converged site as the tests see it: its server, the first run's result, the ports and
planted values, and the ways to look at it (units, OpenBao's seal, Iris's API and registry)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from iris_runtime.agents.ports import can_bind
from iris_runtime.testing.leaks import CommandLineSampler
from tests.provisioning.ansible_host import AnsibleHost, AnsibleRun
from tests.provisioning.site_scenario import DATA

BOXED = "boxed"  # an agent whose tools run at the namespace level (bubblewrap)


def free_ports() -> dict[str, Any]:
    """OpenBao's two ports, Iris's API port and ten agent bridge ports (+100 for their APIs),
    all free on loopback now."""
    for _ in range(200):
        base = random.randrange(20000, 30000, 200)
        agent_ports = list(range(base + 10, base + 20))
        wanted = [base, base + 1, base + 2, *agent_ports, *(p + 100 for p in agent_ports)]
        if all(can_bind(port) for port in wanted):
            return {
                "bao": base,
                "bao_cluster": base + 1,
                "api": base + 2,
                "agents": f"{agent_ports[0]}-{agent_ports[-1]}",
            }
    raise RuntimeError("no free block of ports on loopback")


@dataclass
class Site:
    server: AnsibleHost
    first: AnsibleRun
    ports: dict[str, Any]
    values: dict[str, str]
    init_file: Path
    commands: CommandLineSampler  # every process's command line while the package runs

    @property
    def name(self) -> str:
        return self.server.name

    def run(self, *argv: str, timeout: float = 60.0) -> str:
        done = self.server.host.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def path(self, inside: str | Path) -> Path:
        return self.server.host.path(inside)

    @property
    def iris_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def bao_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['bao']}"

    def api_token(self) -> str:
        return self.path("/iris/secrets/api-token").read_text().strip()

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.iris_url}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def seal_status(self) -> dict[str, Any] | None:
        try:
            reply = requests.get(f"{self.bao_url}/v1/sys/seal-status", timeout=2)
        except requests.RequestException:
            return None
        status: dict[str, Any] = reply.json()
        return status

    def unit_state(self, unit: str) -> str:
        done = self.server.host.run("systemctl", "is-active", unit)
        return done.stdout.strip()

    def registry(self) -> dict[str, Any]:
        registry: dict[str, Any] = json.loads(self.path(DATA / "agents.json").read_text())
        return registry

    def audit(self) -> list[dict[str, Any]]:
        path = self.path(DATA / "audit" / "secrets.jsonl")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ask_iris(site: Site, session: str, text: str) -> str:
    reply = requests.post(
        f"{site.iris_url}/sessions/{session}/message",
        json={"text": text},
        headers={"Authorization": f"Bearer {site.api_token()}"},
        timeout=300,
    )
    assert reply.status_code == 200, reply.text
    answer: str = reply.json()["text"]
    return answer


def assert_ok(run: AnsibleRun, site: Site) -> None:
    recap = run.recap.get(site.name)
    assert run.returncode == 0 and recap is not None and recap.failed == 0, run.describe()

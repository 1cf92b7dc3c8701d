"""An agent host: ``iris agents ensure`` run on another host (a network namespace joined by a veth
link) creates an agent whose bridge faces the network over TLS, and the Iris host registers it
with that URL and its own token. Iris then answers ``@agent`` through it, and the agent reads its
allow-listed secret through Iris's broker over TLS.

The agent host runs the same ``ensure`` as any host (process backend here: a real Iris on the
agent host supervises the agent; the systemd path is the fleet converge test's)."""

from __future__ import annotations

import hashlib
import json
import secrets as random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import iris_runtime
from iris_runtime.testing.netns import NetNamespace
from iris_runtime.testing.openbao import OpenBaoDev
from iris_runtime.testing.pki import OpenBaoPki
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.agents.test_agents_ensure import write_env_file

pytestmark = pytest.mark.slow

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
SKILL_MD = """---
name: weather-report
description: Reads the weather API.
secrets: [WEATHER_API_KEY]
---
Run get-secret WEATHER_API_KEY.
"""


class NetnsIris(IrisServer):
    """``iris serve`` on the other host; its API faces the network (TLS), so the test can ask
    its /health from here."""

    netns: NetNamespace | None = None

    def command(self) -> list[str]:
        assert self.netns is not None
        return self.netns.command(*super().command())


@pytest.fixture
def far_host() -> Iterator[NetNamespace]:
    with NetNamespace() as netns:
        yield netns


def test_ensure_on_an_agent_host_registers_a_tls_bridge_with_iris(
    far_host: NetNamespace, openbao: OpenBaoDev, tmp_path: Path
) -> None:
    pki = OpenBaoPki(openbao.client(), f"pki-{random.token_hex(4)}")
    ca = str(pki.write_ca(tmp_path / "ca.pem"))
    iris_cert, iris_key = pki.issue("iris", ip_sans=[far_host.host_addr]).write(tmp_path, "iris")
    host_cert, host_key = pki.issue("agents", ip_sans=[far_host.addr]).write(tmp_path, "agents")

    # The Iris host: its API (the broker) faces the agent host over TLS.
    iris = IrisServer(
        tmp_path / "iris",
        host=far_host.host_addr,
        cafile=ca,
        env={"IRIS_TLS_CERT": str(iris_cert), "IRIS_TLS_KEY": str(iris_key)},
    ).start()
    # The agent host: a runtime whose agents' bridges listen on its own address, over TLS.
    skills = tmp_path / "agent-host" / "skills" / "weather-report"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(SKILL_MD)
    agent_host = NetnsIris(
        tmp_path / "agent-host",
        host=far_host.addr,
        cafile=ca,
        env={
            "IRIS_TLS_CERT": str(host_cert),
            "IRIS_TLS_KEY": str(host_key),
            "IRIS_AGENT_TLS_CERT": str(host_cert),
            "IRIS_AGENT_TLS_KEY": str(host_key),
            "IRIS_TLS_CACERT": ca,
            "IRIS_BRIDGE_HOST": far_host.addr,
            "IRIS_AGENT_BROKER_URL": iris.url,
            "IRIS_SERVICE_MANAGER": "process",
            "IRIS_REPO_DIR": str(REPO_DIR),
            "IRIS_AGENT_PORTS": "4300-4349",
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(tmp_path / "script.json"),
        },
    )
    agent_host.netns = far_host
    out = tmp_path / "reads.txt"
    get_secret = Path(sys.executable).parent / "get-secret"
    command = (
        f"{{ {get_secret} --no-newline WEATHER_API_KEY | sha256sum; "
        f"{get_secret} BILLING_API_KEY; echo billing_exit=$?; }} > {out} 2>&1"
    )
    rule = {
        "when": "weather now",
        "turns": [[{"tool": "bash", "args": {"command": command}}], [{"text": "sunny"}]],
    }
    (tmp_path / "script.json").write_text(json.dumps({"rules": [rule]}))
    agent_host.start()
    try:
        env_file = write_env_file(tmp_path / "agent-host.env", agent_host.environment())
        done = subprocess_in(far_host, env_file, "weather", "--skill", "weather-report")
        assert done["action"] == "created", done

        registry = json.loads((agent_host.data_dir / "agents.json").read_text())
        url = registry["weather"]["bridge_url"]
        assert url.startswith(f"https://{far_host.addr}:43"), url
        token = (agent_host.data_dir / "agents" / "weather" / "api-token").read_text().strip()

        # Registered with Iris on the Iris host: its bridge URL, its token (stdin), its secret.
        registered = run_iris(
            "agents",
            "register",
            "weather",
            url,
            "--secret",
            "WEATHER_API_KEY",
            "--token-stdin",
            env=clean_environment(IRIS_DATA_DIR=str(iris.data_dir)),
            stdin=token + "\n",
        )
        assert registered.returncode == 0, registered.stderr
        assert token not in registered.stdout + registered.stderr

        value = "w-" + random.token_hex(12)
        for name, secret in (("WEATHER_API_KEY", value), ("BILLING_API_KEY", "b-no")):
            assert (
                iris.request("PUT", f"/secrets/{name}", json_body={"value": secret}).status == 200
            )

        # Without the CA, Iris cannot verify the agent host and says so.
        reply = iris.post("/sessions/s-1/message", json_body={"text": "@weather weather now"})
        assert reply.status == 502 and "failed TLS verification" in reply.json()["error"]
        iris.stop()
        iris.env["IRIS_TLS_CACERT"] = ca
        iris.start()
        reply = iris.post("/sessions/s-2/message", json_body={"text": "@weather weather now"})
        assert reply.status == 200 and reply.json()["text"] == "sunny", reply.body
        lines = out.read_text().splitlines()
        assert lines[0].split()[0] == hashlib.sha256(value.encode()).hexdigest(), lines
        assert lines[-1] == "billing_exit=3"

        # The same declaration again changes nothing.
        again = subprocess_in(far_host, env_file, "weather", "--skill", "weather-report")
        assert (again["action"], again["changed"]) == ("unchanged", False)
    finally:
        agent_host.stop()
        iris.stop()


def subprocess_in(netns: NetNamespace, env_file: Path, *args: str) -> dict[str, object]:
    """``iris --env-file F agents ensure ARGS --json`` run on the agent host."""
    import subprocess

    done = subprocess.run(
        netns.command(
            sys.executable,
            "-m",
            "iris_runtime",
            "--env-file",
            str(env_file),
            "agents",
            "ensure",
            *args,
            "--json",
        ),
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result

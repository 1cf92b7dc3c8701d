"""What TLS settings a spawned agent gets: Iris's own certificate and key never reach an agent
(its bash could read the key and impersonate Iris's broker to agents on other hosts). An agent
host's agents get the host's *agent* certificate (``IRIS_AGENT_TLS_CERT``/``_KEY``) as their
bridge's, and only when that bridge faces the network."""

from __future__ import annotations

from pathlib import Path

import iris_runtime
from iris_runtime.agents.home import AgentRecord
from iris_runtime.agents.spawn import Spawner
from iris_runtime.config import Settings
from iris_runtime.provision.unit import render_unit, template_path

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
CA = "/etc/ssl/certs/ca-certificates.crt"


def record(manager: str = "systemd") -> AgentRecord:
    return AgentRecord(
        name="crawler",
        mode="docker" if manager == "docker" else "service",
        manager=manager,
        bridge_port=4000,
        api_port=4100,
        skills=(),
        provider="scripted",
        model="m",
        created="2026-12-02T00:00:00Z",
    )


def spawner(tmp_path: Path, **env: str) -> Spawner:
    """Certificate and key paths are only passed on (never read); the CA must exist."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    settings = Settings.from_env(
        {"IRIS_DATA_DIR": str(data), "IRIS_REPO_DIR": str(REPO_DIR), **env}
    )
    return Spawner(settings)


def test_a_local_agent_never_gets_iris_own_tls_key(tmp_path: Path) -> None:
    iris_tls = {
        "IRIS_API_HOST": "192.0.2.10",
        "IRIS_TLS_CERT": "/etc/iris/tls/iris.crt",
        "IRIS_TLS_KEY": "/etc/iris/tls/iris.key",
        "IRIS_TLS_CACERT": CA,
    }
    spawn = spawner(tmp_path, **iris_tls)
    for manager in ("systemd", "process", "docker"):
        launch = spawn.launch_for(record(manager), tmp_path / "home", {})
        assert "IRIS_TLS_KEY" not in launch.environment, manager
        assert "IRIS_TLS_CERT" not in launch.environment, manager
        assert launch.bridge_url.startswith("http://127.0.0.1:"), launch.bridge_url
    launch = spawn.launch_for(record(), tmp_path / "home", {})
    unit = render_unit(launch, template_path(REPO_DIR))
    assert "LoadCredential" not in unit
    assert "iris.key" not in unit


def test_iris_key_is_not_the_agents_even_with_a_network_bridge_host(tmp_path: Path) -> None:
    spawn = spawner(
        tmp_path,
        IRIS_BRIDGE_HOST="192.0.2.10",
        IRIS_INSECURE_HTTP="1",
        IRIS_TLS_CERT="/etc/iris/tls/iris.crt",
        IRIS_TLS_KEY="/etc/iris/tls/iris.key",
    )
    launch = spawn.launch_for(record(), tmp_path / "home", {})
    assert "IRIS_TLS_KEY" not in launch.environment
    assert "iris.key" not in render_unit(launch, template_path(REPO_DIR))


def test_an_agent_host_gives_its_agents_the_agent_certificate(tmp_path: Path) -> None:
    spawn = spawner(
        tmp_path,
        IRIS_BRIDGE_HOST="192.0.2.20",
        IRIS_AGENT_TLS_CERT="/etc/iris/tls/agents.crt",
        IRIS_AGENT_TLS_KEY="/etc/iris/tls/agents.key",
        IRIS_TLS_CACERT=CA,
    )
    launch = spawn.launch_for(record(), tmp_path / "home", {})
    assert launch.bridge_url == "https://192.0.2.20:4000"
    assert launch.environment["IRIS_TLS_CERT"] == "/etc/iris/tls/agents.crt"
    assert launch.environment["IRIS_TLS_KEY"] == "/etc/iris/tls/agents.key"
    assert launch.environment["IRIS_TLS_CACERT"] == CA
    unit = render_unit(launch, template_path(REPO_DIR))
    assert "LoadCredential=iris-tls-key:/etc/iris/tls/agents.key" in unit


def test_the_default_broker_url_follows_the_api_address_and_scheme(tmp_path: Path) -> None:
    """The Iris host's own agents reach the broker where the API listens: loopback (plain, even
    when the API listens on every interface), else its address over TLS."""
    cases = {
        "127.0.0.1": "http://127.0.0.1:3000",
        "0.0.0.0": "http://127.0.0.1:3000",
        "::": "http://[::1]:3000",
        "192.0.2.10": "https://192.0.2.10:3000",
        "2001:db8::10": "https://[2001:db8::10]:3000",
    }
    tls = {"IRIS_TLS_CERT": "/etc/iris/tls/iris.crt", "IRIS_TLS_KEY": "/etc/iris/tls/iris.key"}
    for host, url in cases.items():
        spawn = spawner(tmp_path, IRIS_API_HOST=host, **tls)
        launch = spawn.launch_for(record(), tmp_path / "home", {})
        assert launch.environment["IRIS_SECRET_BROKER_URL"] == url, host

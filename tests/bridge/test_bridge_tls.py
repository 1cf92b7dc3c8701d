"""The bridge across hosts: an agent in its own network namespace (another host, joined by a
veth link) serves its bridge over TLS with a certificate from OpenBao's PKI engine; Iris calls it
through the real API, verifies the certificate, and refuses plain HTTP off loopback unless the
operator allowed it with ``IRIS_INSECURE_HTTP``."""

from __future__ import annotations

import hashlib
import secrets as random
import socket
import ssl
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from iris_runtime.testing.netns import NetNamespace
from iris_runtime.testing.openbao import OpenBaoDev
from iris_runtime.testing.pki import OpenBaoPki
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import register
from tests.bridge.remote_agent import RemoteAgent

pytestmark = pytest.mark.slow

StartIris = Callable[..., IrisServer]
TLS_PORT = 4100
PLAIN_PORT = 4101


@pytest.fixture(scope="module")
def far_host() -> Iterator[NetNamespace]:
    with NetNamespace() as netns:
        yield netns


@pytest.fixture(scope="module")
def pki(openbao: OpenBaoDev) -> OpenBaoPki:
    return OpenBaoPki(openbao.client(), f"pki-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("far")


@pytest.fixture(scope="module")
def ca_file(pki: OpenBaoPki, folder: Path) -> Path:
    return pki.write_ca(folder / "ca.pem")


@pytest.fixture(scope="module")
def tls_agent(
    far_host: NetNamespace, pki: OpenBaoPki, folder: Path, ca_file: Path
) -> Iterator[RemoteAgent]:
    issued = pki.issue("far", ip_sans=[far_host.addr])
    agent = RemoteAgent(
        "far",
        far_host,
        folder,
        TLS_PORT,
        token="far-" + random.token_urlsafe(24),
        tls=issued.write(folder, "far"),
        cacert=ca_file,
    ).start()
    yield agent
    agent.stop()


def ask(iris: IrisServer, text: str) -> tuple[int, dict[str, object]]:
    reply = iris.post(f"/sessions/s-{uuid.uuid4().hex[:8]}/message", json_body={"text": text})
    return reply.status, reply.json()


def test_iris_calls_an_agent_on_another_host_over_verified_tls(
    start_iris: StartIris, tls_agent: RemoteAgent, ca_file: Path, far_host: NetNamespace
) -> None:
    iris = start_iris(IRIS_TLS_CACERT=str(ca_file))
    register(iris, "far", tls_agent.bridge_url, token=tls_agent.token)
    assert tls_agent.bridge_url.startswith(f"https://{far_host.addr}:")
    status, body = ask(iris, "@far hello across")
    assert (status, body.get("text")) == (200, "echo: hello across"), body

    # The chain: the agent presents the leaf issued for its address, signed by the PKI's CA.
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection((far_host.addr, TLS_PORT), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=far_host.addr) as tls,
    ):
        cert = tls.getpeercert()
        assert tls.version() in {"TLSv1.2", "TLSv1.3"}
    assert dict(pair[0] for pair in cert["subject"])["commonName"] == "far"
    assert dict(pair[0] for pair in cert["issuer"])["commonName"] == "Iris test CA"
    assert ("IP Address", far_host.addr) in cert["subjectAltName"]

    # Plain HTTP to the TLS port gets no answer; the agent's API port is not on the network.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{far_host.addr}:{TLS_PORT}/bridge/jobs/x", timeout=10)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{far_host.addr}:{TLS_PORT + 100}/health", timeout=10)


def test_an_agent_whose_certificate_iris_cannot_verify_is_refused(
    start_iris: StartIris, tls_agent: RemoteAgent
) -> None:
    iris = start_iris()  # no IRIS_TLS_CACERT: the system's CAs do not know the PKI's root
    register(iris, "far", tls_agent.bridge_url, token=tls_agent.token)
    status, body = ask(iris, "@far are you there")
    assert status == 502, body
    assert "failed TLS verification" in body["error"] and "IRIS_TLS_CACERT" in body["error"]
    assert tls_agent.token not in body["error"]


def test_plain_http_off_loopback_only_with_the_insecure_switch(
    start_iris: StartIris, far_host: NetNamespace, folder: Path
) -> None:
    # Serving: the agent host refuses to start a plain bridge off loopback...
    refused = run_iris(
        "serve",
        env=clean_environment(
            IRIS_DATA_DIR=str(folder / "refused-data"),
            AGENT_NAME="plain",
            BRIDGE_PORT=str(PLAIN_PORT),
            IRIS_BRIDGE_HOST=far_host.addr,
        ),
        timeout=60,
    )
    assert refused.returncode != 0
    assert "IRIS_TLS_CERT" in refused.stderr and "IRIS_INSECURE_HTTP=1" in refused.stderr

    # ...and serves it when the operator says so.
    agent = RemoteAgent(
        "plain",
        far_host,
        folder,
        PLAIN_PORT,
        token="plain-" + random.token_urlsafe(24),
        extra_env={"IRIS_INSECURE_HTTP": "1"},
    ).start()
    try:
        # Calling: Iris refuses the http:// URL before sending anything (the token included)...
        strict = start_iris()
        register(strict, "plain", agent.bridge_url, token=agent.token)
        status, body = ask(strict, "@plain hi")
        assert status == 502, body
        assert "plain HTTP to another host" in body["error"]
        assert "IRIS_INSECURE_HTTP=1" in body["error"]
        assert not list((agent.data_dir / "bridge-jobs").glob("*"))

        # ...unless it was told the network is trusted.
        lax = start_iris(IRIS_INSECURE_HTTP="1")
        register(lax, "plain", agent.bridge_url, token=agent.token)
        status, body = ask(lax, "@plain hi")
        assert (status, body.get("text")) == (200, "echo: hi"), body
    finally:
        agent.stop()


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"IRIS_API_HOST": "0.0.0.0"}, "IRIS_API_PORT"),
        ({"IRIS_TLS_CERT": "/nonexistent.crt"}, "go together"),
        ({"IRIS_TLS_CACERT": "/nonexistent-ca.pem"}, "IRIS_TLS_CACERT /nonexistent-ca.pem does"),
        ({"IRIS_TLS_CACERT": "GARBAGE"}, "is not a PEM CA bundle"),
        ({"IRIS_BRIDGE_HOST": "0.0.0.0", "IRIS_INSECURE_HTTP": "1"}, "IRIS_BRIDGE_HOST=0.0.0.0"),
        ({"IRIS_BRIDGE_HOST": "[::]", "IRIS_INSECURE_HTTP": "1"}, "is no address"),
        (
            {
                "IRIS_API_HOST": "0.0.0.0",
                "IRIS_TLS_CERT": "/nonexistent.crt",
                "IRIS_TLS_KEY": "/x.key",
            },
            "does not exist",
        ),
        (
            {"IRIS_API_HOST": "0.0.0.0", "IRIS_TLS_CERT": "GARBAGE", "IRIS_TLS_KEY": "GARBAGE"},
            "not a PEM certificate",
        ),
    ],
)
def test_bad_tls_settings_stop_serve_with_a_clear_error(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    env = {k: str(garbage) if v == "GARBAGE" else v for k, v in env.items()}
    done = run_iris(
        "serve", env=clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), **env), timeout=60
    )
    assert done.returncode != 0
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_bridge_recover_follows_the_same_tls_rules(
    tls_agent: RemoteAgent, ca_file: Path, tmp_path: Path
) -> None:
    """``iris bridge recover`` sends the agent's token: never over plain HTTP to another host,
    and over TLS only to a certificate it verifies against IRIS_TLS_CACERT."""
    from iris_runtime.agents.registry import AgentRegistry

    data = tmp_path / "data"
    data.mkdir()
    registry = AgentRegistry(data / "agents.json")
    registry.register("plain", "http://198.51.100.55:4000", [], "plain-" + random.token_hex(8))
    registry.register("far", tls_agent.bridge_url, [], tls_agent.token)
    env = clean_environment(IRIS_DATA_DIR=str(data))
    request_id = f"req-{uuid.uuid4().hex}"

    done = run_iris("bridge", "recover", "plain", request_id, env=env, timeout=30)
    assert done.returncode != 0 and "plain HTTP to another host" in done.stderr, done.stderr

    done = run_iris("bridge", "recover", "far", request_id, env=env, timeout=60)
    assert done.returncode != 0 and "failed TLS verification" in done.stderr, done.stderr

    env["IRIS_TLS_CACERT"] = str(ca_file)
    done = run_iris("bridge", "recover", "far", request_id, env=env, timeout=60)
    assert done.returncode != 0 and "has no job" in done.stderr, done.stderr  # verified, heard


def test_tls_files_are_not_needed_when_every_listener_is_on_loopback(tmp_path: Path) -> None:
    """A Docker agent inherits the host's IRIS_TLS_* paths, which do not exist in its container,
    and binds loopback only: it must start."""
    iris = IrisServer(
        tmp_path / "data",
        env={"IRIS_TLS_CERT": "/nonexistent.crt", "IRIS_TLS_KEY": "/nonexistent.key"},
    ).start()
    try:
        assert iris.get("/health").status == 200
    finally:
        iris.stop()


def test_an_api_on_every_interface_speaks_plain_http_on_loopback_and_tls_elsewhere(
    far_host: NetNamespace, pki: OpenBaoPki, folder: Path, ca_file: Path, tmp_path: Path
) -> None:
    """TLS is chosen per connection by the address it arrived on: the host's own agents and
    health checks use http://127.0.0.1, other hosts https://<address>."""
    cert, key = pki.issue("wild", ip_sans=[far_host.host_addr]).write(folder, "wild")
    server = IrisServer(
        tmp_path / "data",
        env={"IRIS_API_HOST": "0.0.0.0", "IRIS_TLS_CERT": str(cert), "IRIS_TLS_KEY": str(key)},
    )
    server.start()  # its own /health check is plain HTTP to 0.0.0.0, i.e. loopback
    try:
        plain = requests.get(f"http://127.0.0.1:{server.port}/health", timeout=10)
        assert plain.status_code == 200
        secure = requests.get(
            f"https://{far_host.host_addr}:{server.port}/health", verify=str(ca_file), timeout=10
        )
        assert secure.status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{far_host.host_addr}:{server.port}/health", timeout=10)
    finally:
        server.stop()


def test_an_agent_on_another_host_reads_its_secret_through_the_tls_broker(
    far_host: NetNamespace, pki: OpenBaoPki, folder: Path, ca_file: Path
) -> None:
    """The whole fleet path: a message to ``@agent`` reaches the agent host over the TLS bridge,
    and the agent's ``get-secret`` reaches Iris's broker over TLS the other way, where only its
    allow-listed secret is handed out."""
    iris_cert, iris_key = pki.issue("iris", ip_sans=[far_host.host_addr]).write(folder, "iris")
    iris = IrisServer(
        folder / "iris-broker-data",
        host=far_host.host_addr,  # reachable from the agent host, so TLS
        cafile=str(ca_file),
        env={
            "IRIS_TLS_CERT": str(iris_cert),
            "IRIS_TLS_KEY": str(iris_key),
            "IRIS_TLS_CACERT": str(ca_file),
        },
    ).start()
    out = folder / "secret-reads.txt"
    get_secret = Path(sys.executable).parent / "get-secret"
    command = (
        f"{{ {get_secret} --no-newline WEATHER_API_KEY | sha256sum; "
        f"{get_secret} BILLING_API_KEY; echo billing_exit=$?; }} > {out} 2>&1"
    )
    agent = RemoteAgent(
        "weather",
        far_host,
        folder,
        TLS_PORT + 2,
        token="weather-" + random.token_urlsafe(24),
        tls=pki.issue("weather", ip_sans=[far_host.addr]).write(folder, "weather"),
        cacert=ca_file,
        extra_env={
            "IRIS_SECRETS_MODE": "store",
            "IRIS_SECRET_BROKER_URL": iris.url,
            "IRIS_TLS_CACERT": str(ca_file),
        },
    )
    agent.rules(
        [
            {
                "when": "read the weather key",
                "turns": [[{"tool": "bash", "args": {"command": command}}], [{"text": "read"}]],
            }
        ]
    )
    agent.start()
    try:
        register(
            iris, "weather", agent.bridge_url, "--secret", "WEATHER_API_KEY", token=agent.token
        )
        value = "w-" + random.token_hex(12)
        for name, secret in (("WEATHER_API_KEY", value), ("BILLING_API_KEY", "b-nope")):
            assert (
                iris.request("PUT", f"/secrets/{name}", json_body={"value": secret}).status == 200
            )

        status, body = ask(iris, "@weather read the weather key")
        assert (status, body.get("text")) == (200, "read"), body
        lines = out.read_text().splitlines()
        assert lines[0].split()[0] == hashlib.sha256(value.encode()).hexdigest(), lines
        assert lines[-1] == "billing_exit=3" and "denied" in lines[-2]
        audit = (iris.data_dir / "audit" / "secrets.jsonl").read_text()
        assert '"caller": "weather"' in audit.replace('":"', '": "')
        assert value not in audit and value not in agent.log_tail(400)
    finally:
        agent.stop()
        iris.stop()

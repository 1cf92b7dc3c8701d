"""The broker on a 3-node OpenBao raft cluster: ``IRIS_VAULT_ADDR`` lists every node, and
secret reads go on when the node Iris talks to (the raft leader) stops.

Real parts only: three ``bao server`` processes joined through ``retry_join``, and a served Iris
(gunicorn) whose agent reads through ``GET /secrets/<name>`` with its own token.
"""

from __future__ import annotations

import secrets as random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.testing.openbao import OpenBaoError, find_bao
from iris_runtime.testing.openbao_cluster import OpenBaoCluster
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris

pytestmark = pytest.mark.slow

AGENT_TOKEN = "agent-w-" + random.token_urlsafe(24)
WEATHER = "weather-" + random.token_hex(8)
BILLING = "billing-" + random.token_hex(8)
# Reads that must all answer once a majority has a leader again.
STEADY_READS = 20
# The election after losing the leader takes about a second here; this only bounds a hang.
RECOVERY_BOUND = 60.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[OpenBaoCluster]:
    try:
        bao = find_bao()
    except OpenBaoError as exc:
        pytest.fail(str(exc), pytrace=False)
    with OpenBaoCluster(3, bao) as running:
        running.enable_kv()
        yield running


@pytest.fixture(scope="module")
def iris(cluster: OpenBaoCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrisServer]:
    root = tmp_path_factory.mktemp("cluster")
    token_file = root / "vault-token"
    token_file.write_text(cluster.root_token)
    token_file.chmod(0o600)
    server = IrisServer(
        root / "data",
        env={
            "IRIS_SECRET_BACKEND": "vault",
            # The leader first: stopping it is the failover the test is about.
            "IRIS_VAULT_ADDR": ", ".join(cluster.addrs),
            "IRIS_VAULT_TOKEN_FILE": str(token_file),
            "IRIS_VAULT_TIMEOUT_SECONDS": "2",
        },
    ).start()
    AgentRegistry(server.data_dir / "agents.json").register(
        "weather", "http://127.0.0.1:4001", ["WEATHER_API_KEY"], AGENT_TOKEN
    )
    for name, value in (("WEATHER_API_KEY", WEATHER), ("BILLING_API_KEY", BILLING)):
        assert server.request("PUT", f"/secrets/{name}", json_body={"value": value}).status == 200
    yield server
    server.stop()


def read_as_agent(server: IrisServer, name: str) -> tuple[int, dict[str, str]]:
    reply = server.get(f"/secrets/{name}", headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    return reply.status, reply.json()


def test_the_agent_reads_its_secret_from_the_cluster_and_is_refused_another(
    iris: IrisServer,
) -> None:
    assert read_as_agent(iris, "WEATHER_API_KEY") == (
        200,
        {"name": "WEATHER_API_KEY", "value": WEATHER},
    )
    status, body = read_as_agent(iris, "BILLING_API_KEY")
    assert status == 403 and body["code"] == "secret_denied"
    assert BILLING not in str(body)


def test_reads_go_on_when_the_leader_stops_and_fail_clearly_without_a_majority(
    cluster: OpenBaoCluster, iris: IrisServer
) -> None:
    leader = cluster.leader()
    assert leader is cluster.nodes[0]  # the first address, the one Iris uses
    leader.stop()

    failed, started = 0, time.monotonic()
    while read_as_agent(iris, "WEATHER_API_KEY")[0] != 200:
        failed += 1
        assert time.monotonic() - started < RECOVERY_BOUND, iris.log_tail()
    gap = time.monotonic() - started
    print(f"failover: {failed} failed reads, first answer after {gap * 1000:.0f} ms")
    for _ in range(STEADY_READS):
        assert read_as_agent(iris, "WEATHER_API_KEY") == (
            200,
            {"name": "WEATHER_API_KEY", "value": WEATHER},
        )
    # Writes reach the new leader too.
    assert (
        iris.request("PUT", "/secrets/AFTER", json_body={"value": "after-failover"}).status == 200
    )

    log = iris.log_tail(200)
    assert f"vault: {leader.addr} failed" in log
    assert cluster.root_token not in log and WEATHER not in log

    # One node of three left: no quorum, so no writes; reads are answered only while some node
    # still can. With every node down the error is a clear 503 naming the nodes, never a value.
    other_leader = cluster.leader()
    other_leader.stop()
    last = next(node for node in cluster.nodes if node.running)
    reply = iris.request("PUT", "/secrets/NO_QUORUM", json_body={"value": "no-quorum"})
    assert reply.status == 503, reply.body
    last.stop()
    status, body = read_as_agent(iris, "WEATHER_API_KEY")
    assert status == 503, body
    assert body["code"] == "secret_store_unavailable"
    assert "Vault at" in body["error"] and all(addr in body["error"] for addr in cluster.addrs)
    assert "unreachable: connection refused" in body["error"]
    assert WEATHER not in str(body)

    # The nodes come back sealed, are unsealed, and Iris recovers without a restart.
    for node in cluster.nodes:
        node.start()
    for node in cluster.nodes:
        cluster.unseal_follower(node)
    cluster.leader()
    started = time.monotonic()
    while read_as_agent(iris, "WEATHER_API_KEY")[0] != 200:
        assert time.monotonic() - started < RECOVERY_BOUND, iris.log_tail()
    assert iris.request("PUT", "/secrets/BACK", json_body={"value": "back"}).status == 200


def test_iris_vault_addr_lists_are_checked(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"IRIS_VAULT_ADDR": " https://a.example:8200/ ,https://b.example:8200"}
    )
    assert settings.vault_addrs == ("https://a.example:8200", "https://b.example:8200")
    for bad, words in (
        ("https://a:8200,,https://b:8200", "comma-separated"),
        ("https://a:8200,vault-b:8200", "'vault-b:8200'"),
        ("https://a:8200,https://a:8200", "same address twice"),
    ):
        with pytest.raises(ConfigError, match=words):
            Settings.from_env({"IRIS_VAULT_ADDR": bad})
        # Through the real entry point: refused before anything starts, naming the variable.
        done = run_iris(
            "serve",
            env=clean_environment(
                IRIS_DATA_DIR=str(tmp_path / "data"),
                IRIS_SECRET_BACKEND="vault",
                IRIS_VAULT_ADDR=bad,
            ),
            timeout=60,
        )
        assert done.returncode != 0
        assert "IRIS_VAULT_ADDR" in done.stderr, done.stderr
    assert not (tmp_path / "data" / "agents.json").exists()


def test_plain_http_vault_on_another_host_needs_the_insecure_switch(tmp_path: Path) -> None:
    """The AppRole secret id, tokens and secret values must not cross a network in clear."""
    addrs = "http://127.0.0.1:8200,http://192.0.2.7:8200"
    with pytest.raises(ConfigError, match="plain HTTP to another host"):
        Settings.from_env({"IRIS_VAULT_ADDR": addrs})
    done = run_iris(
        "serve",
        env=clean_environment(
            IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_SECRET_BACKEND="vault", IRIS_VAULT_ADDR=addrs
        ),
        timeout=60,
    )
    assert done.returncode != 0 and "IRIS_INSECURE_HTTP=1" in done.stderr, done.stderr
    allowed = Settings.from_env({"IRIS_VAULT_ADDR": addrs, "IRIS_INSECURE_HTTP": "1"})
    assert allowed.vault_addrs == tuple(addrs.split(","))

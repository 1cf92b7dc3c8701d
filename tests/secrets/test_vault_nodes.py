"""``VaultNodes``: which failures move a request to the next node, and which never do."""

from __future__ import annotations

import socket
from collections.abc import Callable

import hvac
import hvac.exceptions as hvac_errors
import pytest
import requests

from iris_runtime.config import Settings
from iris_runtime.secrets.backend import SecretStoreUnavailable
from iris_runtime.secrets.vault_connection import VaultConnection
from iris_runtime.secrets.vault_nodes import VaultNodes

ADDRS = ("http://127.0.0.1:18201", "http://127.0.0.1:18202", "http://127.0.0.1:18203")


def nodes() -> VaultNodes:
    return VaultNodes([hvac.Client(url=addr, token="") for addr in ADDRS])


def failing_on(failures: dict[str, Exception], calls: list[str]) -> Callable[[hvac.Client], str]:
    def op(client: hvac.Client) -> str:
        calls.append(client.url)
        if client.url in failures:
            raise failures[client.url]
        return client.url

    return op


@pytest.mark.parametrize(
    "error",
    [
        hvac_errors.InvalidRequest("bad"),
        hvac_errors.Forbidden("no"),
        hvac_errors.Unauthorized("who"),
        hvac_errors.InvalidPath("none"),
    ],
)
def test_a_4xx_is_never_retried_on_another_node(error: Exception) -> None:
    vault, calls = nodes(), []
    with pytest.raises(type(error)):
        vault.run(failing_on({ADDRS[0]: error}, calls), idempotent=True)
    assert calls == [ADDRS[0]]
    assert vault.current == ADDRS[0] and vault.failovers == 0


@pytest.mark.parametrize(
    "error",
    [
        requests.exceptions.ConnectionError("refused"),
        requests.exceptions.ConnectTimeout("slow"),
        hvac_errors.VaultDown("sealed"),
        hvac_errors.InternalServerError("no active node"),
        hvac_errors.VaultNotInitialized("lost its data"),
        hvac_errors.BadGateway("forwarding failed"),
    ],
)
def test_node_failures_move_on_and_the_answering_node_stays(error: Exception) -> None:
    vault, calls = nodes(), []
    assert vault.run(failing_on({ADDRS[0]: error}, calls)) == ADDRS[1]
    assert calls == [ADDRS[0], ADDRS[1]]
    assert vault.current == ADDRS[1] and vault.failovers == 1
    calls.clear()
    assert vault.run(failing_on({}, calls)) == ADDRS[1]
    assert calls == [ADDRS[1]]
    # Each node keeps its own client: nothing was re-pointed.
    assert [c.url for c in vault.clients] == list(ADDRS)


def test_after_a_read_timeout_only_a_read_goes_to_another_node() -> None:
    timeout = requests.exceptions.ReadTimeout("sent, no answer")
    vault, calls = nodes(), []
    with pytest.raises(requests.exceptions.ReadTimeout):
        vault.run(failing_on({ADDRS[0]: timeout}, calls))  # a write: maybe done already
    assert calls == [ADDRS[0]] and vault.failovers == 0
    calls.clear()
    assert vault.run(failing_on({ADDRS[0]: timeout}, calls), idempotent=True) == ADDRS[1]
    assert calls == [ADDRS[0], ADDRS[1]]


def test_every_node_down_raises_the_last_failure_after_one_try_each() -> None:
    vault, calls = nodes(), []
    down = {addr: requests.exceptions.ConnectionError(addr) for addr in ADDRS}
    with pytest.raises(requests.exceptions.ConnectionError):
        vault.run(failing_on(down, calls), idempotent=True)
    assert calls == list(ADDRS)


def test_the_token_is_every_nodes() -> None:
    vault = nodes()
    vault.set_token("s.shared")
    assert {c.token for c in vault.clients} == {"s.shared"} and vault.token == "s.shared"


def closed_ports(count: int) -> list[int]:
    ports = []
    for _ in range(count):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    return ports


def test_a_cluster_with_every_node_down_is_a_clear_error() -> None:
    addrs = [f"http://127.0.0.1:{port}" for port in closed_ports(3)]
    settings = Settings.from_env(
        {"IRIS_VAULT_ADDR": ",".join(addrs), "IRIS_VAULT_TIMEOUT_SECONDS": "2"}
    )
    connection = VaultConnection(settings)
    try:
        with pytest.raises(SecretStoreUnavailable) as caught:
            connection.raw(
                lambda c: c.sys.read_health_status(method="GET"),
                what="the health check",
                idempotent=True,
            )
    finally:
        connection.close()
    message = caught.value.message
    assert "unreachable" in message
    for addr in addrs:
        assert addr in message, message
    assert connection.nodes.failovers == 2

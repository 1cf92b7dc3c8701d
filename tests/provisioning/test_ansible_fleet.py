"""playbooks/site.yml converged on a fleet: three OpenBao nodes (one raft cluster) and the Iris
host, each a booted Debian (systemd as PID 1) in its own network namespace on a private LAN that
the test creates.

Then: the cluster has three voters, one active; Iris is given every node's address; secret reads
through Iris's broker go on when the raft leader's OpenBao stops (the gap is printed, not
asserted); the stopped node comes back unsealed by itself; a second converge is ``changed=0``.

Everything is installed from the session wheelhouse and the controller's checkout, as in
test_ansible_site.py; the rootfs and wheelhouse caches are shared with it.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.provisioning.ansible_fleet import Fleet, FleetHost
from tests.provisioning.ansible_host import AnsibleRun, require_ansible, snapshot_checkout
from tests.provisioning.fleet_network import FleetNetwork
from tests.provisioning.rootfs import debian_rootfs, require_root_and  # noqa: F401 (fixture)
from tests.provisioning.wheelhouse import iris_wheelhouse  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

SECRET = "WEATHER_API_KEY"
BAO_PORT = 8200
API_PORT = 3000
STEADY_READS = 20


def wait_for(check: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class FleetSite:
    fleet: Fleet
    first: AnsibleRun
    values: dict[str, str]
    init_file: Path

    @property
    def nodes(self) -> list[FleetHost]:
        return self.fleet.in_group("iris_secrets")

    @property
    def iris(self) -> FleetHost:
        return self.fleet.hosts["iris"]

    def bao_url(self, node: FleetHost) -> str:
        return f"http://{node.addr}:{BAO_PORT}"

    def health(self, node: FleetHost) -> int:
        try:
            return requests.get(f"{self.bao_url(node)}/v1/sys/health", timeout=3).status_code
        except requests.RequestException:
            return 0

    def leader(self) -> FleetHost:
        return wait_for(
            lambda: next((n for n in self.nodes if self.health(n) == 200), None), "an active node"
        )

    def root_token(self) -> str:
        token: str = json.loads(self.init_file.read_text())["root_token"]
        return token

    def read_through_iris(self, name: str = SECRET) -> tuple[int, str]:
        """``GET /secrets/<name>`` on the Iris host, as a local client of its API."""
        script = (
            "import json, sys, urllib.request, urllib.error\n"
            "token = open('/iris/secrets/api-token').read().strip()\n"
            f"req = urllib.request.Request('http://127.0.0.1:{API_PORT}/secrets/{name}', "
            "headers={'Authorization': 'Bearer ' + token})\n"
            "try:\n"
            "    r = urllib.request.urlopen(req, timeout=30)\n"
            "    print(r.status, json.load(r)['value'])\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code, json.load(e).get('code'))\n"
        )
        out = self.iris.run("/iris/venv/bin/python", "-c", script).split(maxsplit=1)
        return int(out[0]), out[1].strip() if len(out) > 1 else ""


@pytest.fixture(scope="module")
def fleet_site(
    debian_rootfs: Path,  # noqa: F811
    iris_wheelhouse: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FleetSite]:
    require_root_and("systemd-nspawn", "nsenter", "unshare", "ip")
    require_ansible()
    workdir = tmp_path_factory.mktemp("fleet")
    controller = workdir / "controller"
    controller.mkdir(mode=0o700)
    init_file = controller / "openbao-init.json"
    values = {SECRET: "weather-" + secrets.token_hex(12)}
    with FleetNetwork() as network:
        fleet = Fleet(debian_rootfs, workdir / "ansible", network)
        try:
            for name in ("bao1", "bao2", "bao3"):
                fleet.boot(name, ["iris_secrets"])
            fleet.boot("iris", ["iris_runtime"])
            for node in fleet.in_group("iris_secrets"):
                node.host_vars.update(
                    iris_secrets_listen_address=node.addr,
                    iris_secrets_url=f"http://{node.addr}:{BAO_PORT}",
                )
            fleet.group_vars.update(
                iris_secrets_init_file=str(init_file),
                iris_secrets_wheelhouse=str(iris_wheelhouse),
                iris_secrets_port=BAO_PORT,
                # A private LAN that exists only inside this machine.
                iris_secrets_allow_plaintext=True,
                iris_secrets_auto_unseal=True,
                iris_secrets_values=values,
                iris_runtime_wheelhouse=str(iris_wheelhouse),
                iris_runtime_source_dir=str(snapshot_checkout(controller / "checkout")),
                iris_runtime_plugins=["iris-skill-get-secret", "iris-skill-spawn-agent"],
                iris_runtime_api_port=API_PORT,
                iris_runtime_provider="scripted",
                iris_runtime_secret_backend="vault",
            )
            first = fleet.playbook("playbooks/site.yml", label="converge")
            yield FleetSite(fleet, first, values, init_file)
        finally:
            fleet.stop()


def assert_ok(run: AnsibleRun) -> None:
    failed = {host: r.failed for host, r in run.recap.items() if r.failed or r.unreachable}
    assert run.returncode == 0 and run.recap and not failed, run.describe()


def test_the_fleet_converges(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    print(f"\nfleet first converge: {fleet_site.first.seconds:.1f} s")


def test_three_nodes_form_one_raft_cluster(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    leader = site.leader()
    assert sorted(site.health(n) for n in site.nodes) == [200, 429, 429]

    def voters() -> list[dict[str, Any]] | None:
        reply = requests.get(
            f"{site.bao_url(leader)}/v1/sys/storage/raft/configuration",
            headers={"X-Vault-Token": site.root_token()},
            timeout=10,
        )
        servers: list[dict[str, Any]] = reply.json()["data"]["config"]["servers"]
        return servers if len(servers) == 3 and all(s["voter"] for s in servers) else None

    servers = wait_for(voters, "three voters")
    assert sorted(s["node_id"] for s in servers) == ["bao1", "bao2", "bao3"]
    # Every node serves the seeded value (standbys forward to the active node).
    for node in site.nodes:
        reply = requests.get(
            f"{site.bao_url(node)}/v1/secret/data/iris/{SECRET}",
            headers={"X-Vault-Token": site.root_token()},
            timeout=10,
        )
        assert reply.json()["data"]["data"] == {"value": site.values[SECRET]}


def test_iris_is_given_every_node_and_reads_through_the_cluster(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    env = site.iris.path("/iris/.env").read_text()
    expected = ",".join(site.bao_url(n) for n in site.nodes)
    assert f"IRIS_VAULT_ADDR={expected}" in env or f'IRIS_VAULT_ADDR="{expected}"' in env, env
    assert site.read_through_iris() == (200, site.values[SECRET])


def test_reads_go_on_when_the_leaders_openbao_stops(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    leader = site.leader()
    leader.run("systemctl", "stop", "openbao.service")
    started, failed = time.monotonic(), 0
    while site.read_through_iris()[0] != 200:
        failed += 1
        assert time.monotonic() - started < 120, "reads did not resume"
    gap = time.monotonic() - started
    print(f"\nleader {leader.name} stopped: {failed} failed reads, answered after {gap:.2f} s")
    for _ in range(STEADY_READS):
        assert site.read_through_iris() == (200, site.values[SECRET])
    new_leader = site.leader()
    assert new_leader is not leader

    # It comes back sealed; its own unseal unit (auto_unseal) lets it rejoin as a standby.
    leader.run("systemctl", "start", "openbao.service")
    wait_for(lambda: site.health(leader) == 429, f"{leader.name} back as a standby")


def test_a_second_converge_changes_nothing(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    again = fleet_site.fleet.playbook("playbooks/site.yml", label="again")
    assert_ok(again)
    changed = {host: r.changed for host, r in again.recap.items() if r.changed}
    assert not changed, again.describe()
    print(f"\nfleet second converge: {again.seconds:.1f} s")

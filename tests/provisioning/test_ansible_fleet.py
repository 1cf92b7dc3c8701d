"""playbooks/site.yml converged on a fleet: three OpenBao nodes (one raft cluster), the Iris
host and an agent host, each a booted Debian (systemd as PID 1) in its own network namespace on a
private LAN that the test creates.

Then: the cluster has three voters, one active; Iris is given every node's address; a message to
``@weather`` (an agent on the agent host) answers through Iris's API, over the TLS bridge (the
certificate chain is checked, plain HTTP gets nothing); the agent reads its allow-listed secret
through Iris's broker over TLS and is refused another; secret reads go on when the raft leader's
OpenBao stops (the gap is printed, not asserted) and the node comes back unsealed by itself;
rebooting the agent host brings the agent back, registered; a second converge is ``changed=0``.

Certificates come from OpenBao's PKI engine (the session's dev server), placed on the hosts as
the files an operator supplies.

Everything is installed from the session wheelhouse and the controller's checkout, as in
ansible_site/; the rootfs and wheelhouse caches are shared with it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.testing.openbao import OpenBaoDev
from iris_runtime.testing.pki import OpenBaoPki
from tests.provisioning.ansible_fleet import Fleet, FleetHost
from tests.provisioning.ansible_host import AnsibleRun, require_ansible, snapshot_checkout
from tests.provisioning.fleet_network import FleetNetwork
from tests.provisioning.rootfs import debian_rootfs, require_root_and  # noqa: F401 (fixture)
from tests.provisioning.site_scenario import (
    AGENT,
    ALLOWED_SECRET,
    OTHER_SECRET,
    SCRIPT,
    SKILL,
    seed_host,
)
from tests.provisioning.waiting import wait_for
from tests.provisioning.wheelhouse import iris_wheelhouse  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

SECRET = ALLOWED_SECRET
BAO_PORT = 8200
API_PORT = 3000
STEADY_READS = 20
TLS_DIR = "/etc/iris/tls"


@dataclass
class FleetSite:
    fleet: Fleet
    first: AnsibleRun
    values: dict[str, str]
    init_file: Path
    ca_file: Path

    @property
    def agent_host(self) -> FleetHost:
        return self.fleet.hosts["agent1"]

    @property
    def iris_url(self) -> str:
        return f"https://{self.iris.addr}:{API_PORT}"

    def api_token(self) -> str:
        return self.iris.path("/iris/secrets/api-token").read_text().strip()

    def iris_registry(self) -> dict[str, Any]:
        registry: dict[str, Any] = json.loads(self.iris.path("/iris/data/agents.json").read_text())
        return registry

    def ask_agent(self, text: str) -> requests.Response:
        """A message to ``@weather`` through Iris's API, from this (the operator's) machine."""
        return requests.post(
            f"{self.iris_url}/sessions/fleet-{secrets.token_hex(4)}/message",
            json={"text": f"@{AGENT} {text}"},
            headers={"Authorization": f"Bearer {self.api_token()}"},
            verify=str(self.ca_file),
            timeout=180,
        )

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
        """``GET /secrets/<name>`` on Iris's API (TLS, on the LAN) with Iris's own token."""
        reply = requests.get(
            f"{self.iris_url}/secrets/{name}",
            headers={"Authorization": f"Bearer {self.api_token()}"},
            verify=str(self.ca_file),
            timeout=60,
        )
        body = reply.json()
        return reply.status_code, str(body.get("value") or body.get("code"))


def place_tls(member: FleetHost, pki: OpenBaoPki, prefix: str = "IRIS_TLS") -> dict[str, str]:
    """The operator's files: the host's certificate (for its address) and key, and the CA. The
    key stays root's (0600): units get it as a systemd credential. ``prefix`` IRIS_AGENT_TLS
    names them as an agent host's agents' bridge certificate."""
    folder = member.path(TLS_DIR)
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    cert, _key = pki.issue(member.name, ip_sans=[member.addr]).write(folder, "host")
    cert.chmod(0o644)
    pki.write_ca(folder / "ca.crt").chmod(0o644)
    return {
        f"{prefix}_CERT": f"{TLS_DIR}/host.crt",
        f"{prefix}_KEY": f"{TLS_DIR}/host.key",
        "IRIS_TLS_CACERT": f"{TLS_DIR}/ca.crt",
    }


@pytest.fixture(scope="module")
def fleet_site(
    debian_rootfs: Path,  # noqa: F811
    iris_wheelhouse: Path,  # noqa: F811
    openbao: OpenBaoDev,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FleetSite]:
    require_root_and("systemd-nspawn", "nsenter", "unshare", "ip")
    require_ansible()
    workdir = tmp_path_factory.mktemp("fleet")
    controller = workdir / "controller"
    controller.mkdir(mode=0o700)
    init_file = controller / "openbao-init.json"
    values = {
        SECRET: "weather-" + secrets.token_hex(12),
        OTHER_SECRET: "billing-" + secrets.token_hex(12),
    }
    pki = OpenBaoPki(openbao.client(), f"pki-fleet-{secrets.token_hex(4)}")
    ca_file = pki.write_ca(controller / "ca.crt")
    with FleetNetwork() as network:
        fleet = Fleet(debian_rootfs, workdir / "ansible", network)
        try:
            for name in ("bao1", "bao2", "bao3"):
                fleet.boot(name, ["iris_secrets"])
            iris = fleet.boot("iris", ["iris_runtime"])
            agent_host = fleet.boot("agent1", ["iris_agent_hosts"])
            # Iris's API faces the LAN (agent hosts use it as their broker): TLS. The OpenBao
            # nodes here speak plain HTTP on a LAN inside this machine, which Iris refuses unless
            # told explicitly (IRIS_INSECURE_HTTP; a real fleet gives OpenBao certificates).
            iris.host_vars.update(
                iris_runtime_api_host=iris.addr,
                iris_runtime_env={**place_tls(iris, pki), "IRIS_INSECURE_HTTP": "1"},
            )
            agent_host.host_vars.update(
                iris_runtime_env={
                    **place_tls(agent_host, pki, "IRIS_AGENT_TLS"),
                    "IRIS_BRIDGE_HOST": agent_host.addr,
                    "IRIS_AGENT_BROKER_URL": f"https://{iris.addr}:{API_PORT}",
                    "IRIS_SCRIPT_FILE": str(SCRIPT),
                },
                iris_agent_agents=[{"name": AGENT, "skills": [SKILL, "get-secret"]}],
            )
            seed_host(agent_host.host)  # the agent's skill and the model's rules
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
            yield FleetSite(fleet, first, values, init_file, ca_file)
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


def test_an_agent_on_its_own_host_answers_through_iris_and_reads_only_its_secret(
    fleet_site: FleetSite,
) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    entry = site.iris_registry()[AGENT]
    assert entry["bridge_url"].startswith(f"https://{site.agent_host.addr}:"), entry
    assert entry["secrets"] == [SECRET] and entry.get("token")
    local = json.loads(site.agent_host.path("/iris/data/agents.json").read_text())[AGENT]
    assert local["token"] == entry["token"]  # its own token, registered with Iris
    assert site.agent_host.run("systemctl", "is-active", f"iris-agent-{AGENT}.service").strip() == (
        "active"
    )
    assert not site.agent_host.path("/etc/systemd/system/iris.service").exists()

    reply = site.ask_agent("read your secrets")
    assert reply.status_code == 200, reply.text
    assert reply.json()["text"] == "done reading"
    home = site.agent_host.path(f"/iris/agents/{AGENT}")
    digest = hashlib.sha256(site.values[SECRET].encode()).hexdigest()
    assert (home / "secret.sha").read_text().strip() == digest
    assert (home / "other.rc").read_text().strip() == "3"  # refused by the broker
    audit = [
        json.loads(line)
        for line in site.iris.path("/iris/data/audit/secrets.jsonl").read_text().splitlines()
    ]
    decisions = {(r["name"], r["decision"]) for r in audit if r["caller"] == AGENT}
    assert {(SECRET, "allowed"), (OTHER_SECRET, "denied")} <= decisions

    # The key stayed root's; the unit got it as a credential. No secret in the unit file.
    key = site.agent_host.path(f"{TLS_DIR}/host.key")
    assert key.stat().st_mode & 0o077 == 0
    unit = site.agent_host.path(f"/etc/systemd/system/iris-agent-{AGENT}.service").read_text()
    assert f"LoadCredential=iris-tls-key:{TLS_DIR}/host.key" in unit
    for value in (*site.values.values(), entry["token"]):
        assert value not in unit


def test_the_bridge_across_hosts_is_tls_only(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    url = site.iris_registry()[AGENT]["bridge_url"]
    port = int(url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(site.ca_file))
    with (
        socket.create_connection((site.agent_host.addr, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=site.agent_host.addr) as tls,
    ):
        cert = tls.getpeercert()
    assert dict(pair[0] for pair in cert["subject"])["commonName"] == "agent1"
    assert dict(pair[0] for pair in cert["issuer"])["commonName"] == "Iris test CA"
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{site.agent_host.addr}:{port}/bridge/jobs/x", timeout=10)
    # The agent's own API port stays on the agent host's loopback.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{site.agent_host.addr}:{port + 100}/health", timeout=10)


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


def test_rebooting_the_agent_host_brings_the_agent_back(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    site = fleet_site
    site.agent_host.host.restart()
    reply = wait_for(
        lambda: (r := site.ask_agent("read your secrets")).status_code == 200 and r,
        "the agent answering after the reboot",
        timeout=180,
    )
    assert reply.json()["text"] == "done reading"


def test_a_second_converge_changes_nothing(fleet_site: FleetSite) -> None:
    assert_ok(fleet_site.first)
    again = fleet_site.fleet.playbook("playbooks/site.yml", label="again")
    assert_ok(again)
    changed = {host: r.changed for host, r in again.recap.items() if r.changed}
    assert not changed, again.describe()
    print(f"\nfleet second converge: {again.seconds:.1f} s")


def test_runtime_converges_with_the_first_secrets_node_down(fleet_site: FleetSite) -> None:
    """The first node's facts cannot be read: Iris still gets every node's address, and its
    facts come from a live node."""
    assert_ok(fleet_site.first)
    site = fleet_site
    first = site.nodes[0]
    first.run("systemctl", "stop", "openbao.service")
    try:
        run = site.fleet.playbook("playbooks/runtime.yml", label="runtime-first-down")
        assert_ok(run)
        env = site.iris.path("/iris/.env").read_text()
        assert ",".join(site.bao_url(n) for n in site.nodes) in env, env
        assert site.read_through_iris() == (200, site.values[SECRET])
    finally:
        first.run("systemctl", "start", "openbao.service")
    wait_for(lambda: site.health(first) in (200, 429), f"{first.name} back in the cluster")


def test_a_replaced_first_node_joins_the_cluster_instead_of_making_one(
    fleet_site: FleetSite,
) -> None:
    """docs/deploy.md "Replacing a secrets node" for the first of the list: it must join the
    existing cluster (same data, same keys), never initialise a second one."""
    assert_ok(fleet_site.first)
    site = fleet_site
    first = site.nodes[0]
    first.run("systemctl", "stop", "openbao.service")
    leader = site.leader()
    removed = requests.post(
        f"{site.bao_url(leader)}/v1/sys/storage/raft/remove-peer",
        headers={"X-Vault-Token": site.root_token()},
        json={"server_id": first.name},
        timeout=10,
    )
    assert removed.status_code == 204, removed.text  # OpenBao 2.x: no content
    first.run("sh", "-c", "rm -rf /var/lib/openbao/* /var/lib/openbao/.[!.]*")
    run = site.fleet.playbook("playbooks/secrets.yml", label="replace-first")
    assert_ok(run)
    assert "!!! OpenBao on" not in run.output  # the new-initialisation warning
    wait_for(lambda: site.health(first) in (200, 429), f"{first.name} serving the cluster")
    reply = requests.get(
        f"{site.bao_url(first)}/v1/secret/data/iris/{SECRET}",
        headers={"X-Vault-Token": site.root_token()},  # the old root token: the same cluster
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["data"]["data"] == {"value": site.values[SECRET]}

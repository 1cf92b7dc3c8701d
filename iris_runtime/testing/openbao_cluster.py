"""A real OpenBao HA cluster on loopback: N ``bao server`` processes sharing integrated raft
storage, for the tests and benchmarks of Iris's failover between Vault nodes.

Each node is an :class:`~iris_runtime.testing.openbao.OpenBaoRaft` with its own ``node_id`` and
a ``retry_join`` block naming every other node, as the Ansible role configures real hosts. The
cluster port (raft replication and request forwarding) is TLS with certificates OpenBao makes
itself; the API listeners are plain HTTP on loopback only.

``start()`` initialises the first node, unseals every node with the same keys and waits until
all of them are in the cluster (one active, the rest standbys).
"""

from __future__ import annotations

from iris_runtime.testing.openbao import (
    STARTUP_TIMEOUT,
    OpenBaoError,
    OpenBaoRaft,
    UnsealKeys,
    find_bao,
)
from iris_runtime.testing.polling import poll
from iris_runtime.testing.scoped import Scoped

# OpenBao's sys/health codes: 200 active, 429 unsealed standby.
ACTIVE = 200
STANDBY = 429


class ClusterNode(OpenBaoRaft):
    """One member: its config names the others (``peers``) to join; no audit device."""

    kind = "OpenBao cluster node"
    audited = False

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id!r}, addr={self.addr!r}, running={self.running})"


class OpenBaoCluster(Scoped):
    """``size`` nodes (odd, so a majority exists after losing one), initialised and unsealed."""

    def __init__(self, size: int = 3, bao: str | None = None) -> None:
        if size < 1 or size % 2 == 0:
            raise ValueError(f"a raft cluster needs an odd number of nodes, not {size}")
        binary = bao or find_bao()
        self.nodes = [ClusterNode(binary, f"node-{i}") for i in range(size)]
        for node in self.nodes:
            node.peers = [peer.addr for peer in self.nodes if peer is not node]
        self.keys: UnsealKeys | None = None

    @property
    def addrs(self) -> list[str]:
        return [node.addr for node in self.nodes]

    @property
    def root_token(self) -> str:
        if self.keys is None:
            raise OpenBaoError("the cluster has no root token before start()")
        return self.keys.root_token

    def start(self, timeout: float = STARTUP_TIMEOUT) -> OpenBaoCluster:
        for node in self.nodes:
            node.start(timeout)
        first = self.nodes[0]
        self.keys = first.init()
        first.unseal(timeout)
        # Autopilot promotes a joined node to voter after it has been stable this long (10 s by
        # default); until then losing the leader loses the quorum.
        first.http(
            "POST",
            "sys/storage/raft/autopilot/configuration",
            token=self.root_token,
            json={"server_stabilization_time": "1s"},
        )
        for node in self.nodes[1:]:
            node.adopt(self.keys)
            self.unseal_follower(node, timeout)
        first.wait_for(self._all_voters, "the joined nodes did not become voters", timeout)
        return self

    def _all_voters(self) -> bool:
        leader = self.leader()
        reply = leader.http("GET", "sys/storage/raft/configuration", token=self.root_token)
        servers = reply.json()["data"]["config"]["servers"] if reply.status_code == 200 else []
        return len(servers) == len(self.nodes) and all(s["voter"] for s in servers)

    def enable_kv(self, path: str = "secret", timeout: float = STARTUP_TIMEOUT) -> None:
        """A KV v2 mount, once it accepts writes (a new mount upgrades itself first)."""
        leader = self.leader()
        leader.client().sys.enable_secrets_engine("kv", path=path, options={"version": "2"})

        # Standbys wait for the upgrade separately: ask each of them.
        for node in self.nodes:

            def writable(node: ClusterNode = node) -> bool:
                reply = node.http(
                    "POST", f"{path}/data/.probe", token=self.root_token, json={"data": {"x": "1"}}
                )
                return reply.status_code == 200

            node.wait_for(writable, f"the KV mount {path}/ did not become writable", timeout)

    def unseal_follower(self, node: ClusterNode, timeout: float = STARTUP_TIMEOUT) -> None:
        """Unseal a node that joins (or rejoins) through ``retry_join``, and wait until it is
        a standby of the cluster.

        The key is sent again until it takes: a node accepts it only once its join attempt has
        fetched the leader's challenge.
        """
        assert self.keys is not None
        key = self.keys.unseal_key

        def joined() -> bool:
            if node.health() in (ACTIVE, STANDBY):
                return True
            node.http("PUT", "sys/unseal", json={"key": key})
            return False

        node.wait_for(joined, f"{node.node_id} did not join the cluster", timeout)

    def leader(self, timeout: float = STARTUP_TIMEOUT) -> ClusterNode:
        """The active node, once there is one."""

        def active() -> ClusterNode | None:
            # Node by node: one that refuses connections does not hide an active one after it.
            return next((n for n in self.nodes if n.running and _health(n) == ACTIVE), None)

        found = poll(active, timeout)
        if found is not None:
            return found
        raise OpenBaoError(f"no active node within {timeout:g}s")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def _bring_up(self) -> None:
        self.start()

    def _take_down(self) -> None:
        self.cleanup()


def _health(node: ClusterNode) -> int:
    import requests

    try:
        return node.health()
    except requests.RequestException:
        return 0

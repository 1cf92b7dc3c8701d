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

import time
from types import TracebackType

from iris_runtime.testing.openbao import (
    STARTUP_TIMEOUT,
    OpenBaoError,
    OpenBaoRaft,
    UnsealKeys,
    find_bao,
)

# OpenBao's sys/health codes: 200 active, 429 unsealed standby.
ACTIVE = 200
STANDBY = 429

NODE_CONFIG = """\
ui = false
disable_mlock = true
api_addr = "{addr}"
cluster_addr = "https://127.0.0.1:{cluster_port}"

listener "tcp" {{
  address         = "127.0.0.1:{port}"
  cluster_address = "127.0.0.1:{cluster_port}"
  tls_disable     = true
}}

storage "raft" {{
  path    = "{raft_dir}"
  node_id = "{node_id}"
  performance_multiplier = 1
{joins}
}}
"""


class ClusterNode(OpenBaoRaft):
    """One member: its config names the others to join."""

    kind = "OpenBao cluster node"

    def __init__(self, bao: str, node_id: str) -> None:
        super().__init__(bao)
        self.node_id = node_id
        self.peers: list[str] = []

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id!r}, addr={self.addr!r}, running={self.running})"

    def write_config(self) -> None:
        self.raft_dir.mkdir(mode=0o700, exist_ok=True)
        joins = "\n".join(
            f'  retry_join {{\n    leader_api_addr = "{peer}"\n  }}' for peer in self.peers
        )
        self.config_path.write_text(
            NODE_CONFIG.format(
                addr=self.addr,
                port=self.port,
                cluster_port=self.cluster_port,
                raft_dir=self.raft_dir,
                node_id=self.node_id,
                joins=joins,
            )
        )


class OpenBaoCluster:
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
            node.keys = self.keys
            node._redact += [self.keys.unseal_key, self.keys.root_token]
            self.unseal_follower(node, timeout)
        _ = time.monotonic()
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.running and _health(node) == ACTIVE:
                    return node
            time.sleep(0.05)
        raise OpenBaoError(f"no active node within {timeout:g}s")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> OpenBaoCluster:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


def _health(node: ClusterNode) -> int:
    import requests

    try:
        return node.health()
    except requests.RequestException:
        return 0

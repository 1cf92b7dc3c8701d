"""Secret reads through Iris's broker on a 3-node OpenBao raft cluster against a single node, and
the failover gap when the raft leader is killed.

Two real OpenBao setups run side by side on loopback: a single raft node and a 3-node raft
cluster (``iris_runtime.testing.openbao_cluster``: ``retry_join``, every node unsealed). Each
gets an Iris with the ``vault`` backend; the cluster's Iris has ``IRIS_VAULT_ADDR`` listing every
node, the leader first. An agent registered with its own token reads one secret through
``GET /secrets/<name>`` (token → caller → allow-list → vault → audit line), as in
``secret_reads``.

* ``cluster_p50_ms`` / ``cluster_p99_ms``: reads on the cluster's Iris; baseline the same on the
  single node's (phases single, cluster, cluster, single after a warm-up, ``--clients`` each).
* ``failover_gap_ms``: the leader is killed (SIGKILL, no goodbye to its peers) while one client
  reads back to back; the longest time between two successful reads around the kill, median of
  ``--repeats`` kills (the killed node is started again and rejoins in between). Baseline: raft's
  own election, from the kill until a surviving node reports itself active (``sys/health``),
  measured in the same kills; the ratio is what Iris adds on top of the election.
* ``failover_failed_reads``: reads that failed during those gaps (503s while no node is active).

The fleet's converge time is measured by ``tests/provisioning/test_ansible_fleet.py`` (printed),
which needs five booted hosts; it is not repeated here.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cli import bench_parser, run_main
from _figures import emit, emit_percentiles, percentile
from _load import LoadResult, drive_clients
from _servers import temp_workdir
from secret_reads import AGENT_TOKEN, NAME, VALUE, broker, running_broker

from iris_runtime.testing.openbao_cluster import OpenBaoCluster

BENCH = "fleet"


def vault_env(workdir: Path, kind: str, addrs: list[str], token: str) -> dict[str, str]:
    token_file = workdir / f"{kind}-vault-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    return {
        "IRIS_SECRET_BACKEND": "vault",
        "IRIS_VAULT_ADDR": ",".join(addrs),
        "IRIS_VAULT_TOKEN_FILE": str(token_file),
        "IRIS_VAULT_TIMEOUT_SECONDS": "2",
    }


def read_once(url: str) -> bool:
    try:
        reply = requests.get(
            f"{url}/secrets/{NAME}", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}, timeout=30
        )
    except requests.RequestException:
        return False
    return reply.status_code == 200 and reply.json().get("value") == VALUE


def failover(cluster: OpenBaoCluster, url: str) -> tuple[float, float, int]:
    """Kill the leader under a reading client: (gap ms, election ms, failed reads)."""
    stop = threading.Event()
    successes: list[float] = []
    failures = [0]

    def reader() -> None:
        while not stop.is_set():
            if read_once(url):
                successes.append(time.perf_counter())
            else:
                failures[0] += 1

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    time.sleep(0.5)
    leader = cluster.leader()
    assert leader.process is not None
    killed_at = time.perf_counter()
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait()
    cluster.leader()  # polls sys/health of the survivors until one is active
    elected_at = time.perf_counter()
    time.sleep(1.0)
    stop.set()
    thread.join(30)
    before = [t for t in successes if t <= killed_at]
    after = [t for t in successes if t > killed_at]
    gap = (after[0] - (before[-1] if before else killed_at)) * 1000.0 if after else float("inf")
    # The killed node comes back (sealed) and rejoins for the next round.
    leader.process = None
    leader.start()
    cluster.unseal_follower(leader)
    return gap, (elected_at - killed_at) * 1000.0, failures[0]


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=4.0)
    parser.add_argument("--clients", type=int, default=8, help="concurrent readers [8]")
    parser.add_argument("--repeats", type=int, default=3, help="leader kills [3]")
    args = parser.parse_args()
    with (
        temp_workdir() as workdir,
        OpenBaoCluster(1) as single,
        OpenBaoCluster(3) as cluster,
    ):
        for setup in (single, cluster):
            setup.enable_kv()
        leader_first = sorted(cluster.nodes, key=lambda n: n is not cluster.leader())
        cluster_env = vault_env(
            workdir, "cluster", [n.addr for n in leader_first], cluster.root_token
        )
        single_env = vault_env(workdir, "single", single.addrs, single.root_token)
        with (
            running_broker(workdir, "single", single_env) as single_iris,
            running_broker(workdir, "cluster", cluster_env) as cluster_iris,
        ):
            loads = {
                "single": broker(single_iris.base_url),
                "cluster": broker(cluster_iris.base_url),
            }
            measured = {kind: LoadResult() for kind in loads}
            for kind in loads:
                drive_clients(loads[kind], clients=args.clients, seconds=1.0, name=kind)
            for kind in ("single", "cluster", "cluster", "single"):
                measured[kind].add(
                    drive_clients(loads[kind], clients=args.clients, seconds=args.seconds / 2)
                )
            if any(result.errors for result in measured.values()):
                print(f"read errors: {[r.errors[:2] for r in measured.values()]}", file=sys.stderr)
                return 1
            emit_percentiles(
                BENCH, "cluster", measured["cluster"].latencies_ms, measured["single"].latencies_ms
            )
            gaps, elections, failed = [], [], 0
            for _ in range(args.repeats):
                gap, election, failures = failover(cluster, cluster_iris.base_url)
                print(f"kill: gap {gap:.0f} ms, election {election:.0f} ms", file=sys.stderr)
                gaps.append(gap)
                elections.append(election)
                failed += failures
            gap_p50, election_p50 = percentile(gaps, 50), percentile(elections, 50)
            emit(BENCH, "failover_gap_ms", gap_p50, "ms", election_p50)
            emit(BENCH, "failover_failed_reads", float(failed), "count", 0.0)
            return 0


if __name__ == "__main__":
    run_main(BENCH, main)

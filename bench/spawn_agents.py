"""``iris agents spawn`` in process mode: spawn-to-ready time, idle RSS per agent and 20 agents
on one host, each against a bare sub-agent measured in the same run; Docker mode with
``--docker``.

One Iris (offline provider, ``IRIS_SERVICE_MANAGER=process``, ``IRIS_REPO_DIR`` = this checkout,
its own ``IRIS_AGENT_PORTS`` block) supervises the agents; the CLI runs with the same
environment, as an operator's shell would.

* ``spawn_p50_s`` / ``spawn_max_s``: wall time of ``iris agents spawn NAME --service-manager
  process --json``, from starting the CLI to its exit 0 (registered, home created, started by
  Iris's supervisor, ``/health`` answered, one bridge round trip), for ``--agents`` (5) agents one
  after another. Baseline: a bare ``iris serve`` sub-agent (``AGENT_NAME`` + ``BRIDGE_PORT``, same
  offline provider) started directly, ``Popen`` to its first 200 from ``/health``; a bare start
  precedes each spawn, so drift hits both alike.
* ``idle_rss_mb``: after ``--idle`` (2 s) without requests, VmRSS summed over each agent's
  process group (gunicorn master + worker; the group id is the pid Iris's supervisor recorded),
  median over the agents. Baseline: the same for the bare sub-agents.
* ``batch_spawn_s``: ``--batch`` (20) spawns started at once, until the last CLI exits. Baseline:
  as many bare sub-agents started at once, until the last answers ``/health``.
* ``batch_total_rss_mb``: after the batch and ``--idle``, the RSS of all its agents' process
  groups plus Iris's own (master + worker). Baseline: ``--batch`` times the bare sub-agent's
  ``idle_rss_mb``.

``--docker`` (root, ``dockerd``, ``docker``, ``debootstrap``, ``terraform``): a private dockerd
(own socket, data root in the temp dir, no bridge or iptables), a base image imported from a
debootstrap tree (cached under ``--cache-dir``), a copy of the checkout with a wheelhouse, then
``iris agents spawn --mode docker`` twice: ``docker_first_spawn_s`` includes the runtime image
build, ``docker_second_spawn_s`` does not. Baseline: ``docker run`` of the built image as a
sub-agent, to its first 200 from ``/health`` (median of 3). ``--docker-only`` skips the
process-mode figures.

Agents are removed (``--purge``), Iris and dockerd stopped by their pids, on every exit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.provisioning (--docker)

from _cli import bench_parser, run_main
from _docker_mode import docker_spawns
from _figures import emit, percentile
from _proc import group_rss_mb
from _servers import SubAgent, log_tail, start_subagent, stop_process, temp_workdir, wait_healthy
from _supervising_iris import Iris, agent_pgid, cli, finish, remove_all, spawn, supervising_iris

BENCH = "spawn_agents"


# --- bare sub-agents (the baseline) -----------------------------------------------------------


def start_bare(workdir: Path, index: int) -> SubAgent:
    return start_subagent(workdir, name=f"bare-{index}")


def wait_bare(agent: SubAgent) -> None:
    try:
        wait_healthy(agent.server.base_url, agent.server.process, timeout=120)
    except RuntimeError as exc:
        raise RuntimeError(f"bare sub-agent: {exc}\n{log_tail(agent.server.process)}") from None


# --- process mode -----------------------------------------------------------------------------


def sequential(args: argparse.Namespace, workdir: Path, iris: Iris) -> float:
    """Spawn ``--agents`` one after another, each after a bare start; emit the spawn and idle RSS
    figures; returns the bare sub-agent's median idle RSS (MB)."""
    bare: list[SubAgent] = []
    names: list[str] = []
    spawn_s: list[float] = []
    bare_s: list[float] = []
    try:
        for i in range(args.agents):
            agent = start_bare(workdir, i)
            bare.append(agent)
            start = time.perf_counter()
            wait_bare(agent)
            bare_s.append(time.perf_counter() - start)
            name = f"seq-{i}"
            elapsed, summary = spawn(iris, name, "--service-manager", "process")
            names.append(name)  # a failed spawn rolls itself back
            if summary.get("manager") != "process":
                raise RuntimeError(f"{name}: spawned with manager {summary.get('manager')!r}")
            spawn_s.append(elapsed)
            print(
                f"{name}: spawn {elapsed:.2f} s (its own count {summary.get('seconds')} s), "
                f"bare start {bare_s[-1]:.2f} s",
                file=sys.stderr,
            )
        time.sleep(args.idle)
        spawned_rss = [group_rss_mb(agent_pgid(iris, name)) for name in names]
        bare_rss = [group_rss_mb(agent.server.process.pid) for agent in bare]
    finally:
        for agent in bare:
            stop_process(agent.server.process)
        failed = remove_all(iris, names)
    if failed:
        raise RuntimeError(f"remove failed for {', '.join(failed)}")
    base = percentile(bare_s, 50)
    for metric, value in (("spawn_p50_s", percentile(spawn_s, 50)), ("spawn_max_s", max(spawn_s))):
        emit(BENCH, metric, value, "s", base)
    rss, base_rss = percentile(spawned_rss, 50), percentile(bare_rss, 50)
    emit(BENCH, "idle_rss_mb", rss, "MB", base_rss)
    return base_rss


def batch(args: argparse.Namespace, workdir: Path, iris: Iris, bare_rss: float) -> None:
    """``--batch`` bare sub-agents at once (the baseline), then as many spawns at once."""
    count = args.batch
    bare: list[SubAgent] = []
    try:
        start = time.perf_counter()
        bare = [start_bare(workdir, 100 + i) for i in range(count)]
        for agent in bare:
            wait_bare(agent)
        bare_wall = time.perf_counter() - start
    finally:
        for agent in bare:
            stop_process(agent.server.process)
    print(f"{count} bare sub-agents at once: healthy after {bare_wall:.1f} s", file=sys.stderr)

    names = [f"crowd-{i:02d}" for i in range(count)]
    start = time.perf_counter()
    running = [
        (name, cli(iris, "agents", "spawn", name, "--service-manager", "process", "--json"))
        for name in names
    ]
    problems = []
    for name, process in running:
        try:
            finish(process, f"spawn {name}")
        except RuntimeError as exc:
            problems.append(str(exc))
    wall = time.perf_counter() - start
    if problems:
        raise RuntimeError(f"{len(problems)} of {count} spawns failed; first: {problems[0]}")
    print(f"{count} spawns at once: all ready after {wall:.1f} s", file=sys.stderr)
    emit(BENCH, "batch_spawn_s", wall, "s", bare_wall)

    time.sleep(args.idle)
    agents_mb = sum(group_rss_mb(agent_pgid(iris, name)) for name in names)
    iris_mb = group_rss_mb(iris.server.process.pid)
    total = agents_mb + iris_mb
    print(
        f"{count} agents: {agents_mb:.0f} MB ({agents_mb / count:.1f} MB each) + Iris "
        f"{iris_mb:.0f} MB",
        file=sys.stderr,
    )
    base = count * bare_rss
    emit(BENCH, "batch_total_rss_mb", total, "MB", base)
    failed = remove_all(iris, names)
    if failed:
        raise RuntimeError(f"remove failed for {', '.join(failed)}")


def main() -> int:
    parser = bench_parser(__doc__)  # no timed load phase: --seconds is ignored
    parser.add_argument("--agents", type=int, default=5, help="sequential spawns [5]")
    parser.add_argument("--batch", type=int, default=20, help="spawns at once [20]")
    parser.add_argument("--idle", type=float, default=2.0, help="idle seconds before RSS [2.0]")
    parser.add_argument("--docker", action="store_true", help="also Docker mode (root, dockerd)")
    parser.add_argument("--docker-only", action="store_true", help="only Docker mode")
    parser.add_argument(
        "--cache-dir",
        default="~/.cache/iris-bench",
        help="where --docker keeps the debootstrap tree and wheelhouse [%(default)s]",
    )
    args = parser.parse_args()
    if args.agents < 1 or args.batch < 1:
        parser.error("need --agents >= 1 and --batch >= 1")

    with temp_workdir() as workdir:
        if not args.docker_only:
            with supervising_iris(workdir) as iris:
                bare_rss = sequential(args, workdir, iris)
                batch(args, workdir, iris, bare_rss)
        if args.docker or args.docker_only:
            figures, base = docker_spawns(args, workdir)
            for label, value in figures.items():
                emit(BENCH, f"docker_{label}_spawn_s", value, "s", base)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

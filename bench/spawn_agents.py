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
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    HOST,
    Server,
    SubAgent,
    add_common_args,
    emit,
    free_port,
    handle_sigterm,
    log_tail,
    percentile,
    ratio,
    run_main,
    script,
    start_iris,
    start_subagent,
    stop_process,
    temp_workdir,
    wait_healthy,
)

from iris_runtime.provision.process_groups import stop_recorded
from iris_runtime.provision.process_service import ProcessService

BENCH = "spawn_agents"
REPO = Path(__file__).resolve().parents[1]
SPAWN_TIMEOUT = 300.0
PAGE_MB = 1024.0  # VmRSS is in kB


# --- memory -----------------------------------------------------------------------------------


def group_rss_mb(pgid: int) -> float:
    """VmRSS summed over every process whose process group is ``pgid`` (MB)."""
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'.
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return total_kb / PAGE_MB


# --- the supervising Iris and its CLI ---------------------------------------------------------


class Iris(NamedTuple):
    server: Server
    data_dir: Path
    env: dict[str, str]  # what `iris serve` runs with; the CLI gets the same


def clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("IRIS_") and k not in ("AGENT_NAME", "BRIDGE_PORT")
    }


def start_supervising_iris(workdir: Path, extra: dict[str, str]) -> Iris:
    data_dir = workdir / f"iris-{secrets.token_hex(3)}"
    first = random.randrange(20000, 30000, 200)  # bridge ports; API ports are +100
    settings = {
        "IRIS_DATA_DIR": str(data_dir),
        "IRIS_AGENT_PORTS": f"{first}-{first + 99}",
        "IRIS_SERVICE_MANAGER": "process",
        "IRIS_REPO_DIR": str(REPO),
        **extra,
    }
    server = start_iris(workdir, extra_env=settings)
    try:
        wait_healthy(server.base_url, server.process, timeout=60)
    except RuntimeError as exc:
        stop_process(server.process)
        raise RuntimeError(f"iris: {exc}\n{log_tail(server.process)}") from None
    env = clean_env()
    env.update(
        {
            "IRIS_API_HOST": HOST,
            "IRIS_API_PORT": server.base_url.rsplit(":", 1)[1],
            "IRIS_API_TOKEN": server.token,
            "IRIS_PROVIDER": "offline",
            **settings,
        }
    )
    return Iris(server, data_dir, env)


_LIVE: set[subprocess.Popen[str]] = set()  # CLI runs not yet waited for


def cli(iris: Iris, *args: str) -> subprocess.Popen[str]:
    """Start one ``iris`` command in its own session: a Ctrl-C at the terminal reaches only this
    bench, which then interrupts the command exactly once (see :func:`interrupt_cli_runs`)."""
    process = subprocess.Popen(
        [script("iris"), *args],
        env=iris.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _LIVE.add(process)
    return process


def finish(process: subprocess.Popen[str], what: str) -> str:
    """Wait for a CLI run; its stdout, or RuntimeError with its stderr."""
    try:
        out, err = process.communicate(timeout=SPAWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # a spawn rolls itself back on Ctrl-C
        out, err = process.communicate(timeout=SPAWN_TIMEOUT)
        raise RuntimeError(
            f"{what}: no answer after {SPAWN_TIMEOUT:.0f} s\n{err[-2000:]}"
        ) from None
    finally:
        if process.returncode is not None:
            _LIVE.discard(process)
    if process.returncode != 0:
        raise RuntimeError(f"{what}: exit {process.returncode}\n{err[-2000:]}")
    return out


def interrupt_cli_runs() -> None:
    """Ctrl-C to every CLI run still going (a spawn interrupted with the bench rolls itself back:
    no unit, container or registration is left) and wait for them."""
    for process in list(_LIVE):
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
    for process in list(_LIVE):
        try:
            process.communicate(timeout=SPAWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        _LIVE.discard(process)


def spawn(iris: Iris, name: str, *extra: str) -> tuple[float, dict[str, object]]:
    """Run ``iris agents spawn NAME --json``; (wall seconds, its JSON summary)."""
    start = time.perf_counter()
    out = finish(cli(iris, "agents", "spawn", name, *extra, "--json"), f"spawn {name}")
    elapsed = time.perf_counter() - start
    summary: dict[str, object] = json.loads(out)
    return elapsed, summary


def remove_all(iris: Iris, names: Sequence[str]) -> list[str]:
    """``iris agents remove NAME --purge`` for each, concurrently, once any interrupted spawn
    has rolled back; the names that failed."""
    interrupt_cli_runs()
    start = time.perf_counter()
    running = [(name, cli(iris, "agents", "remove", name, "--purge")) for name in names]
    failed = []
    for name, process in running:
        try:
            finish(process, f"remove {name}")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            failed.append(name)
    if names:
        print(
            f"removed {len(names)} agents in {time.perf_counter() - start:.1f} s", file=sys.stderr
        )
    return failed


def agent_pgid(iris: Iris, name: str) -> int:
    row = ProcessService(iris.data_dir).status(name)
    if row is None or row.pid is None:
        raise RuntimeError(f"{name}: no supervised pid in state.db")
    return row.pid  # started with its own session: pgid == pid


@contextlib.contextmanager
def supervising_iris(workdir: Path, extra: dict[str, str] | None = None) -> Iterator[Iris]:
    """An Iris for the spawns; on exit every agent it still supervises is removed, Iris stopped,
    and any group it left behind stopped by its recorded pid (checked against its start time)."""
    iris = start_supervising_iris(workdir, extra or {})
    try:
        yield iris
    finally:
        try:
            interrupt_cli_runs()
            names = [row.name for row in ProcessService(iris.data_dir).processes()]
            if names:
                remove_all(iris, names)
        finally:
            stop_process(iris.server.process)
            for row in ProcessService(iris.data_dir).processes():
                if row.pid is not None:
                    stop_recorded(row.name, row.pid, row.pid_start_time)


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
        emit(BENCH, metric, value, "s", base, ratio(value, base))
    rss, base_rss = percentile(spawned_rss, 50), percentile(bare_rss, 50)
    emit(BENCH, "idle_rss_mb", rss, "MB", base_rss, ratio(rss, base_rss))
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
    emit(BENCH, "batch_spawn_s", wall, "s", bare_wall, ratio(wall, bare_wall))

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
    emit(BENCH, "batch_total_rss_mb", total, "MB", base, ratio(total, base))
    failed = remove_all(iris, names)
    if failed:
        raise RuntimeError(f"remove failed for {', '.join(failed)}")


# --- Docker mode ------------------------------------------------------------------------------

DOCKER_TOOLS = ("dockerd", "docker", "debootstrap", "terraform", "tar")
BASE_IMAGE = "iris-bench-base:bookworm"
RUNTIME_IMAGE = "iris-bench-runtime:local"


class Dockerd(NamedTuple):
    process: subprocess.Popen[bytes]
    env: dict[str, str]  # os.environ + DOCKER_HOST


def docker(daemon: Dockerd, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=daemon.env,
        check=False,
    )


@contextlib.contextmanager
def private_dockerd(root: Path) -> Iterator[Dockerd]:
    """dockerd on its own socket, data and exec root (no bridge, no iptables rules), stopped by
    its pid on exit; its data root (images, layers) is deleted."""
    socket = root / "docker.sock"
    log_path = root / "dockerd.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                "dockerd",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--storage-driver=overlay2",
                f"--data-root={root / 'data'}",
                f"--exec-root={root / 'exec'}",
                f"--pidfile={root / 'dockerd.pid'}",
                "-H",
                f"unix://{socket}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    daemon = Dockerd(process, {**clean_env(), "DOCKER_HOST": f"unix://{socket}"})
    try:
        deadline = time.monotonic() + 60
        while docker(daemon, "version", timeout=10).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace").splitlines()[-20:]
                raise RuntimeError("dockerd did not come up:\n" + "\n".join(tail))
            time.sleep(0.2)
        yield daemon
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # it stops its containers and containerd
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        shutil.rmtree(root / "data", ignore_errors=True)


def base_image(daemon: Dockerd, cache_dir: Path) -> None:
    """``docker import`` of a debootstrap bookworm tree (built once into ``cache_dir``)."""
    from tests.provisioning.rootfs import build_rootfs

    started = time.perf_counter()
    rootfs = build_rootfs(cache_dir / "debian-rootfs")
    print(f"rootfs ready in {time.perf_counter() - started:.0f} s ({rootfs})", file=sys.stderr)
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--exclude=./.iris-rootfs-complete", "-c", "."],
        stdout=subprocess.PIPE,
    )
    imported = subprocess.run(
        ["docker", "import", "-", BASE_IMAGE],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=600,
        env=daemon.env,
        check=False,
    )
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait(timeout=60)
    if imported.returncode != 0:
        raise RuntimeError(f"docker import failed: {imported.stderr}")


def repo_copy(target: Path, cache_dir: Path) -> Path:
    """What the image build and terraform need from the checkout, with ``build/wheelhouse``
    filled by the host's pip (the build has no index; the download is cached in
    ``cache_dir``); spawn writes ``terraform/agents.tf`` here, never in the real checkout."""
    from tests.provisioning.dockerd import copy_checkout
    from tests.provisioning.wheelhouse import build_wheelhouse, image_requirements, link_wheels

    target.mkdir(parents=True)
    copy_checkout(target)
    wheels = build_wheelhouse(cache_dir / "wheelhouse", image_requirements(target))
    link_wheels(wheels, target / "build" / "wheelhouse")
    return target


def docker_run_to_health(daemon: Dockerd) -> float:
    """``docker run`` of the runtime image as a bare sub-agent; seconds to its first /health."""
    bridge_port = free_port()
    api_port = free_port()
    name = f"iris-bench-bare-{secrets.token_hex(3)}"
    env = {
        "AGENT_NAME": "bare",
        "BRIDGE_PORT": str(bridge_port),
        "IRIS_API_PORT": str(api_port),
        "IRIS_API_HOST": HOST,
        "IRIS_API_TOKEN": secrets.token_urlsafe(32),
        "IRIS_PROVIDER": "offline",
    }
    flags = [item for key in env for item in ("--env", key)]
    start = time.perf_counter()
    try:
        run = subprocess.run(
            [
                "docker",
                "run",
                "--detach",
                "--name",
                name,
                "--network",
                "host",
                *flags,
                RUNTIME_IMAGE,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**daemon.env, **env},  # values from the environment, as the module passes them
            check=False,
        )
        if run.returncode != 0:
            raise RuntimeError(f"docker run failed: {run.stderr}")
        wait_healthy(f"http://{HOST}:{api_port}", timeout=120)
        return time.perf_counter() - start
    finally:
        docker(daemon, "rm", "--force", name)


def docker_mode(args: argparse.Namespace, workdir: Path) -> None:
    from tests.provisioning.rootfs import unmount_below

    if os.geteuid() != 0:
        raise RuntimeError("--docker needs root (dockerd, debootstrap)")
    missing = [tool for tool in DOCKER_TOOLS if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"--docker needs {', '.join(missing)}")
    cache_dir = Path(args.cache_dir).expanduser()
    root = Path(tempfile.mkdtemp(prefix="dockerd-", dir="/tmp"))  # short socket path
    try:
        with private_dockerd(root) as daemon:
            base_image(daemon, cache_dir)
            repo = repo_copy(workdir / "repo", cache_dir)
            extra = {
                "IRIS_REPO_DIR": str(repo),
                "IRIS_DOCKER_BASE_IMAGE": BASE_IMAGE,
                "IRIS_DOCKER_IMAGE": RUNTIME_IMAGE,
                "DOCKER_HOST": daemon.env["DOCKER_HOST"],
            }
            with supervising_iris(workdir, extra) as iris:
                names: list[str] = []
                try:
                    figures = {}
                    for label, name in (("first", "dock-1"), ("second", "dock-2")):
                        figures[label], _ = spawn(iris, name, "--mode", "docker")
                        names.append(name)
                        print(f"{name}: spawn {figures[label]:.1f} s", file=sys.stderr)
                    bare = [docker_run_to_health(daemon) for _ in range(3)]
                finally:
                    failed = remove_all(iris, names)
                    for name in failed:  # terraform could not; the container must go anyway
                        docker(daemon, "rm", "--force", f"iris-agent-{name}")
            base = percentile(bare, 50)
            print(
                f"docker run to /health: {', '.join(f'{s:.2f}' for s in bare)} s", file=sys.stderr
            )
            for label, value in figures.items():
                emit(BENCH, f"docker_{label}_spawn_s", value, "s", base, ratio(value, base))
    finally:
        unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)  # no timed load phase: --seconds is ignored
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
    handle_sigterm()
    if args.agents < 1 or args.batch < 1:
        parser.error("need --agents >= 1 and --batch >= 1")

    with temp_workdir() as workdir:
        if not args.docker_only:
            with supervising_iris(workdir) as iris:
                bare_rss = sequential(args, workdir, iris)
                batch(args, workdir, iris, bare_rss)
        if args.docker or args.docker_only:
            docker_mode(args, workdir)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

"""``spawn_agents --docker``: ``iris agents spawn --mode docker`` on a private dockerd
(:mod:`iris_runtime.testing.dockerd`), against ``docker run`` of the image it built.

A base image is imported from a debootstrap tree (built once into ``--cache-dir``), and the
spawns build from a copy of the checkout whose wheelhouse the host's pip filled (the build has no
index; the download is cached in ``--cache-dir``). Needs root, ``dockerd``, ``docker``,
``debootstrap`` and ``terraform``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _figures import percentile
from _servers import HOST, free_port, wait_healthy
from _supervising_iris import REPO, remove_all, spawn, supervising_iris

from iris_runtime.testing.dockerd import Dockerd, copy_checkout, import_rootfs, private_dockerd

DOCKER_TOOLS = ("dockerd", "docker", "debootstrap", "terraform", "tar")
BASE_IMAGE = "iris-bench-base:bookworm"
RUNTIME_IMAGE = "iris-bench-runtime:local"


def base_image(daemon: Dockerd, cache_dir: Path) -> None:
    """``docker import`` of a debootstrap bookworm tree (built once into ``cache_dir``)."""
    from tests.provisioning.rootfs import build_rootfs

    started = time.perf_counter()
    rootfs = build_rootfs(cache_dir / "debian-rootfs")
    print(f"rootfs ready in {time.perf_counter() - started:.0f} s ({rootfs})", file=sys.stderr)
    import_rootfs(daemon, rootfs, BASE_IMAGE, timeout=600)


def repo_copy(target: Path, cache_dir: Path) -> Path:
    """What the image build and terraform need from the checkout, with ``build/wheelhouse``
    filled by the host's pip (the build has no index; the download is cached in
    ``cache_dir``); spawn writes ``terraform/agents.tf`` here, never in the real checkout."""
    from tests.provisioning.wheelhouse import build_wheelhouse, image_requirements, link_wheels

    target.mkdir(parents=True)
    copy_checkout(REPO, target)
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
            ["docker", "run", "--detach", "--name", name, "--network", "host", *flags,
             RUNTIME_IMAGE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**daemon.env, **env},  # values from the environment, as the module passes them
            check=False,
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"docker run failed: {run.stderr}")
        wait_healthy(f"http://{HOST}:{api_port}", timeout=120)
        return time.perf_counter() - start
    finally:
        daemon.docker("rm", "--force", name)


def docker_spawns(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, float], float]:
    """({"first": s, "second": s} of the two docker spawns, the bare ``docker run`` median)."""
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
                "DOCKER_HOST": daemon.host,
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
                        daemon.docker("rm", "--force", f"iris-agent-{name}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"docker run to /health: {', '.join(f'{s:.2f}' for s in bare)} s", file=sys.stderr)
    return figures, percentile(bare, 50)

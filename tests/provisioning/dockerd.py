"""A private Docker daemon for the Docker-mode tests, and what they build on it.

``dockerd`` (Debian's docker.io) starts once per session on its own socket, data root and exec
root under the session's temp dir, without a bridge or iptables rules (containers use the host's
network), and ``DOCKER_HOST`` points the tests and everything they start at it. Nothing is ever
pulled: the base image is ``docker import`` of the debootstrap tree from ``rootfs.py``, and pip in
the image build installs from the session's wheelhouse (``tests/provisioning/wheelhouse.py``).

Fixtures: ``dockerd`` (session), ``docker_base_image`` (session), ``docker_repo`` (session: a copy
of the checkout to build from and to write ``terraform/agents.tf`` into, with the wheels of the
session's wheelhouse).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.provisioning.rootfs import require_root_and
from tests.provisioning.wheelhouse import (  # noqa: F401 (image_requirements: re-exported)
    image_requirements,
    link_wheels,
    session_wheelhouse,
)

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "iris-test-base:bookworm"
START_TIMEOUT = 60.0
# What the image build needs from the checkout (the Dockerfile's COPY lines) plus terraform/.
REPO_PARTS = (
    "Dockerfile",
    ".dockerignore",
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    "iris_runtime",
    "plugins",
    "terraform",
    "agents",  # the scaffolds `iris agents spawn` renders
)


@dataclass(frozen=True)
class Dockerd:
    host: str  # DOCKER_HOST value: unix://<socket>
    pid: int
    root: Path

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "DOCKER_HOST": self.host}
        return subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, env=env
        )


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_until_up(daemon: Dockerd, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd exited ({proc.returncode}):\n{_log_tail(log)}")
        if daemon.docker("version", "--format", "{{.Server.Version}}", timeout=10).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"dockerd did not answer within {START_TIMEOUT:.0f} s:\n{_log_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to our dockerd (it stops its containers and its containerd), by PID."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def _unmount_below(root: Path) -> None:
    """dockerd can leave mounts under its roots (the host netns bind mount, overlay layers of a
    container that did not stop); unmount them so the temp dir can be deleted."""
    prefix = str(root) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        points = [line.split()[4] for line in table]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False, timeout=30)


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dockerd]:
    """A private dockerd for this session; DOCKER_HOST points at it while the session runs."""
    require_root_and("dockerd", "docker")
    root = tmp_path_factory.mktemp("dockerd")
    socket = root / "docker.sock"
    log = root / "dockerd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
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
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    daemon = Dockerd(host=f"unix://{socket}", pid=proc.pid, root=root)
    previous = os.environ.get("DOCKER_HOST")
    try:
        _wait_until_up(daemon, proc, log)
        os.environ["DOCKER_HOST"] = daemon.host
        yield daemon
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        _stop(proc)
        _unmount_below(root)
        # Images and layers are large; the temp dir keeps only logs.
        shutil.rmtree(root / "data", ignore_errors=True)


@pytest.fixture(scope="session")
def docker_base_image(dockerd: Dockerd, debian_rootfs: Path) -> str:
    """The debootstrap tree as a local image (python3 + venv): the runtime image's base."""
    tar = subprocess.Popen(
        ["tar", "-C", str(debian_rootfs), "--exclude=./.iris-rootfs-complete", "-c", "."],
        stdout=subprocess.PIPE,
    )
    env = {**os.environ, "DOCKER_HOST": dockerd.host}
    imported = subprocess.run(
        ["docker", "import", "-", BASE_IMAGE],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait(timeout=60)
    if imported.returncode != 0:
        raise RuntimeError(f"docker import failed: {imported.stderr}")
    return BASE_IMAGE


def copy_checkout(target: Path) -> None:
    """The parts of the checkout the image build and Terraform need (shared with the bench)."""
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.egg-info", ".terraform", "*.tfstate*", ".pytest_cache"
    )
    for part in REPO_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=ignore)
        else:
            shutil.copy2(source, target / part)


@pytest.fixture(scope="session")
def docker_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (sources, Dockerfile, terraform/) with ``build/wheelhouse`` filled
    from the session's wheelhouse, so the image build inside dockerd needs no index. Tests write
    ``terraform/agents.tf`` here, never in the real checkout."""
    repo = tmp_path_factory.mktemp("docker-repo")
    copy_checkout(repo)
    # Only what the image installs: a large extra wheel would only slow every build context.
    wheels = session_wheelhouse(tmp_path_factory)
    link_wheels(wheels, repo / "build" / "wheelhouse", skip_extra=True)
    return repo

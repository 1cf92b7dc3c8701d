"""A private Docker daemon for the Docker-mode tests and the spawn bench, and what they build on it.

``dockerd`` (Debian's docker.io) runs on its own socket, data root and exec root under a directory
the caller owns, without a bridge or iptables rules (containers use the host's network), and is
stopped by its own PID. Nothing is ever pulled: a base image is ``docker import`` of a root file
system tree (:func:`import_rootfs`), and a runtime image is built from a copy of the checkout
(:func:`copy_checkout`) whose ``build/wheelhouse`` the caller fills, so pip needs no index.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with ``DOCKER_HOST`` pointing at this daemon."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            check=False,
        )


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(root: Path, log: Path) -> subprocess.Popen[bytes]:
    socket = root / "docker.sock"
    with log.open("wb") as out:
        return subprocess.Popen(
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
    container that did not stop); unmount them so the directory can be deleted."""
    prefix = str(root) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        points = [line.split()[4] for line in table]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False, timeout=30)


@contextlib.contextmanager
def private_dockerd(root: Path) -> Iterator[Dockerd]:
    """A dockerd with its socket, data and exec root under ``root`` (keep the path short: the
    socket's must fit a unix address). On exit it is stopped by its PID, the mounts it left
    below ``root`` are unmounted and its data root (images, layers: large) is deleted; the log
    (``root/dockerd.log``) stays."""
    log = root / "dockerd.log"
    proc = _start(root, log)
    daemon = Dockerd(host=f"unix://{root / 'docker.sock'}", pid=proc.pid, root=root)
    try:
        _wait_until_up(daemon, proc, log)
        yield daemon
    finally:
        _stop(proc)
        _unmount_below(root)
        shutil.rmtree(root / "data", ignore_errors=True)


def import_rootfs(daemon: Dockerd, rootfs: Path, image: str, *, timeout: float) -> None:
    """``docker import`` of the tree at ``rootfs`` (a debootstrap one: python3 + venv) as
    ``image``, streamed through tar, leaving out the tree's completion marker."""
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--exclude=./.iris-rootfs-complete", "-c", "."],
        stdout=subprocess.PIPE,
    )
    imported = subprocess.run(
        ["docker", "import", "-", image],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=daemon.env,
        check=False,
    )
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait(timeout=60)
    if imported.returncode != 0:
        raise RuntimeError(f"docker import failed: {imported.stderr}")


def copy_checkout(source: Path, target: Path) -> None:
    """The parts of the checkout at ``source`` that the image build and Terraform need, copied
    into ``target`` (where a spawn may then write ``terraform/agents.tf``)."""
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.egg-info", ".terraform", "*.tfstate*", ".pytest_cache"
    )
    for part in REPO_PARTS:
        path = source / part
        if path.is_dir():
            shutil.copytree(path, target / part, ignore=ignore)
        else:
            shutil.copy2(path, target / part)

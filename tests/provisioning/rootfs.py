"""A Debian bookworm root file system made with ``debootstrap``, shared by the tests that need a
real host: booted with ``systemd-nspawn`` (systemd as PID 1) and imported as a Docker base image.

Built once per test session (about a minute) under the session's temp dir, so a CI run is
hermetic; ``IRIS_TEST_ROOTFS_CACHE=<dir>`` keeps it in a directory of your choice instead (reused
across sessions and shared between them: built under a lock, never changed afterwards). The
packages are the ones the uses need: systemd to boot, Python 3.11 with venv for the runtime image,
python3-apt for Ansible's apt module on a managed host. The host's own Python also runs inside it
(same Debian release), which is how the nspawn tests run the checkout under test without
installing it again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SUITE = "bookworm"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "python3-apt",  # what Ansible's apt module needs on a managed host
    "ca-certificates",
    "iproute2",
    "procps",
    "bubblewrap",  # a systemd agent at the namespace sandbox level
    "polkitd",  # chat-driven spawning: the unprivileged Iris starts the agent-unit helper
    "libpam-systemd",  # polkitd's logind
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def host_tools_missing(*tools: str) -> list[str]:
    return [tool for tool in tools if shutil.which(tool) is None]


def require_root_and(*tools: str) -> None:
    """Skip with the reason when the machine cannot run these tests (CI installs everything)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap, systemd-nspawn and dockerd run as root)")
    missing = host_tools_missing(*tools)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (make test installs them on Debian)")


def unmount_below(root: Path) -> None:
    """Lazily unmount every mount at or below ``root``, deepest first."""
    prefix = str(root.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts]
    inside = [p for p in points if p == prefix or p.startswith(prefix + "/")]
    for point in sorted(inside, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def build_rootfs(target: Path) -> Path:
    """Run debootstrap into ``target`` (once; a finished tree is marked and reused)."""
    # The marker holds the package list: a cached tree built with another list is built again.
    done = target / ".iris-rootfs-complete"
    wanted = "\n".join(PACKAGES) + "\n"
    if done.exists() and done.read_text() == wanted:
        return target
    if target.exists():
        shutil.rmtree(target)  # a half-built tree from an interrupted run
    mirror = os.environ.get("IRIS_TEST_DEBIAN_MIRROR", DEFAULT_MIRROR)
    command = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(target),
        mirror,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    finally:
        # debootstrap mounts /proc (and more) inside the tree; interrupted, it leaves them.
        unmount_below(target)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise RuntimeError(f"debootstrap failed ({result.returncode}):\n{tail}")
    done.write_text(wanted)
    return target


def build_shared_rootfs(target: Path) -> Path:
    """:func:`build_rootfs` under an exclusive lock on ``<target>.lock``: sessions sharing one
    cached tree wait for whichever started building it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return build_rootfs(target)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def debian_rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pristine bookworm tree. Treat it as read-only: boot it with an overlay or copy it.

    It is built inside the setup of the first test that asks for it, which pytest-timeout counts
    against that test: modules using it carry ``pytest.mark.timeout(900)``."""
    require_root_and("debootstrap")
    cache = os.environ.get("IRIS_TEST_ROOTFS_CACHE")
    if cache:
        return build_shared_rootfs(Path(cache))
    return build_rootfs(tmp_path_factory.getbasetemp() / "debian-rootfs")

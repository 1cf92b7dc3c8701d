"""What ``docker inspect`` shows of the operator's container, and what Iris refuses there.

The docker level trusts a container it did not create, so before any command runs Iris reads the
container's configuration and refuses one that would hand a command the host: ``--privileged``,
the host's PID namespace, capabilities that undo the container (``SYS_ADMIN`` and the like), the
Docker or containerd socket bound in, Iris's data folder (or a folder above it) bound anywhere,
or a writable mount under ``/agent``, where the file tools promise read-only identity files.
The boundary probe then checks what a command there actually sees.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.tools.sandbox.base import INSIDE_AGENT, INSIDE_WORKSPACE, Mount, WorkspaceView
from iris_runtime.tools.sandbox.view import IDENTITY

# Capabilities with which root in the container (or a set-uid program there) reaches the host.
HOST_CAPABILITIES = frozenset(
    {"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_BOOT"}
)
# Engine sockets: whoever reaches one starts a privileged container of their own.
ENGINE_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
)


def engine_sockets(env: Mapping[str, str]) -> list[Path]:
    """The engine sockets of this host, the one ``DOCKER_HOST`` names included."""
    found = [Path(p) for p in ENGINE_SOCKETS]
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        found.append(Path(host.removeprefix("unix://")))
    return found


def refusals(info: Mapping[str, Any], data_dir: Path, sockets: Iterable[Path]) -> list[str]:
    """Why this container must not run Iris's commands (empty when nothing is wrong)."""
    config = info.get("HostConfig") or {}
    found: list[str] = []
    if config.get("Privileged"):
        found.append("it runs --privileged")
    if config.get("PidMode") == "host":
        found.append("it shares the host's PID namespace (--pid host)")
    added = {str(c).upper().removeprefix("CAP_") for c in config.get("CapAdd") or []}
    if dangerous := sorted(added & HOST_CAPABILITIES):
        found.append(f"it adds the capabilities {', '.join(dangerous)}")
    for mount in info.get("Mounts") or []:
        found += _mount_refusals(mount, data_dir, list(sockets))
    return found


def _mount_refusals(mount: Mapping[str, Any], data_dir: Path, sockets: list[Path]) -> list[str]:
    destination = str(mount.get("Destination") or "")
    writable = bool(mount.get("RW"))
    found: list[str] = []
    if _under(destination, INSIDE_AGENT) and writable:
        found.append(f"{destination} is mounted writable (mount it :ro)")
    source = mount.get("Source")
    if mount.get("Type") != "bind" or not source:
        return found  # a named volume or tmpfs is the container's own
    host = _real(Path(str(source)))
    data = _real(data_dir)
    if any(_real(socket).is_relative_to(host) for socket in sockets):
        found.append(f"{destination} shows the container engine's socket ({source})")
    if data.is_relative_to(host):
        found.append(f"{destination} shows Iris's data folder ({source})")
    elif host.is_relative_to(data) and not _allowed_inside(host, data, destination, writable):
        found.append(
            f"{destination} shows {source}, inside Iris's data folder "
            f"(only the work folder and, read-only under {INSIDE_AGENT}, the agent's "
            f"{', '.join(IDENTITY)} may be mounted)"
        )
    return found


def _allowed_inside(host: Path, data: Path, destination: str, writable: bool) -> bool:
    if host.is_relative_to(data / data_layout.WORK_DIR):
        return True
    identity = any(host.is_relative_to(data / name) for name in IDENTITY)
    return identity and _under(destination, INSIDE_AGENT) and not writable


def view_of(info: Mapping[str, Any], container: str, work: Path) -> WorkspaceView:
    """The work folder at /workspace (required) and the read-only mounts under /agent."""
    by_destination = {
        m.get("Destination"): Path(str(m.get("Source"))) for m in info.get("Mounts") or []
    }
    source = by_destination.get(INSIDE_WORKSPACE)
    if source is None or _real(source) != _real(work):
        raise ValueError(
            f"container {container!r} must show the work folder at {INSIDE_WORKSPACE}: "
            f"start it with -v {work}:{INSIDE_WORKSPACE}"
        )
    extras = tuple(
        Mount(host, str(dest), writable=False)
        for dest, host in by_destination.items()
        if isinstance(dest, str) and _under(dest, INSIDE_AGENT) and dest != INSIDE_AGENT
    )
    return WorkspaceView(Mount(work, INSIDE_WORKSPACE, writable=True), extras)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))

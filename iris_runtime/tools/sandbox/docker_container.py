"""What ``docker inspect`` shows of the operator's container, and what Iris refuses there.

The docker level trusts a container it did not create, so before any command runs Iris reads the
container's configuration and refuses one that would hand a command the host. Mounts are an
allowlist: the work folder at ``/workspace``, the agent's identity files read-only under
``/agent``, the folders the operator lists in ``IRIS_DOCKER_ALLOWED_BINDS``, tmpfs, and named
volumes of the local driver that are not host folders in disguise. Everything else is refused,
and so are ``--privileged``, the host's (or another container's) PID or IPC namespace, added
capabilities beyond Docker's default set, devices, an ``unconfined`` security option, a
container without ``no-new-privileges`` (a set-uid program would make a command root), and a
container whose own user is the commands' uid 10000 (the sweep would kill it). The boundary
probe then checks what a command there actually sees.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.tools.sandbox.base import (
    INSIDE_AGENT,
    INSIDE_WORKSPACE,
    SANDBOX_UID,
    Mount,
    WorkspaceView,
)
from iris_runtime.tools.sandbox.view import IDENTITY

# Docker's default capability set: adding any other reaches the host from root in the container.
DEFAULT_CAPABILITIES = frozenset(
    {
        "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
    }
)  # fmt: skip
ALLOWED_BINDS_VARIABLE = "IRIS_DOCKER_ALLOWED_BINDS"
# Engine sockets: whoever reaches one starts a privileged container of their own.
ENGINE_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/buildkit/buildkitd.sock",
)

VolumeLookup = Callable[[str], Mapping[str, Any]]


def engine_sockets(env: Mapping[str, str]) -> list[Path]:
    """The engine sockets of this host, the one ``DOCKER_HOST`` names included."""
    found = [Path(p) for p in ENGINE_SOCKETS]
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://") and host.removeprefix("unix://"):
        found.append(Path(host.removeprefix("unix://")))
    return found


def allowed_binds(env: Mapping[str, str]) -> list[Path]:
    """The operator's extra host folders (``IRIS_DOCKER_ALLOWED_BINDS``, ``:``-separated)."""
    return [Path(p) for p in env.get(ALLOWED_BINDS_VARIABLE, "").split(":") if p.strip()]


def refusals(
    info: Mapping[str, Any],
    data_dir: Path,
    extra_binds: Iterable[Path],
    volume: VolumeLookup,
    sockets: Iterable[Path] = (),
) -> list[str]:
    """Why this container must not run Iris's commands (empty when nothing is wrong)."""
    config = info.get("HostConfig") or {}
    found = _host_config_refusals(config)
    user = str((info.get("Config") or {}).get("User") or "")
    if user.partition(":")[0] == str(SANDBOX_UID):
        found.append(
            f"its own user is {SANDBOX_UID}, the commands' uid: Iris's sweep of what commands "
            "leave behind would kill it (run it as another user)"
        )
    rules = _MountRules(data_dir, [_real(p) for p in extra_binds], volume, list(sockets))
    for mount in info.get("Mounts") or []:
        found += rules.refusals(mount)
    return found


def _host_config_refusals(config: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    if config.get("Privileged"):
        found.append("it runs --privileged")
    for mode, what in (("PidMode", "PID"), ("IpcMode", "IPC")):
        value = str(config.get(mode) or "")
        if value == "host" or value.startswith("container:"):
            found.append(f"it shares the {what} namespace of {value} (--{what.lower()} {value})")
    added = {str(c).upper().removeprefix("CAP_") for c in config.get("CapAdd") or []}
    if extra := sorted(added - DEFAULT_CAPABILITIES):
        found.append(f"it adds the capabilities {', '.join(extra)}")
    for path in config.get("Tmpfs") or {}:  # --tmpfs lists here, not under Mounts
        if _under(str(path), INSIDE_AGENT):
            found.append(f"{path} must be a read-only bind mount (a tmpfs there hides it)")
    if config.get("Devices"):
        found.append("it has host devices (--device)")
    options = [str(o) for o in config.get("SecurityOpt") or []]
    if unconfined := [o for o in options if "unconfined" in o]:
        found.append(f"it runs with {', '.join(unconfined)}")
    if not any(o in ("no-new-privileges", "no-new-privileges:true") for o in options):
        found.append(
            "it lacks --security-opt no-new-privileges (a set-uid program would make a "
            "command root in the container)"
        )
    return found


class _MountRules:
    def __init__(
        self,
        data_dir: Path,
        extra: list[Path | None],
        volume: VolumeLookup,
        sockets: list[Path],
    ) -> None:
        self.data = _real(data_dir) or data_dir
        self.work = self.data / data_layout.WORK_DIR
        self.extra = [p for p in extra if p is not None]
        self.volume = volume
        self.sockets = [p for p in map(_real, sockets or engine_sockets({})) if p is not None]

    def refusals(self, mount: Mapping[str, Any]) -> list[str]:
        destination = str(mount.get("Destination") or "")
        kind = str(mount.get("Type") or "")
        writable = bool(mount.get("RW"))
        if _under(destination, INSIDE_AGENT) and (writable or kind != "bind"):
            return [f"{destination} must be a read-only bind mount (mount it :ro)"]
        if kind == "tmpfs":
            return []
        if kind == "volume":
            return self._volume_refusals(mount, destination)
        if kind != "bind":
            return [f"{destination} is a {kind or 'unknown'} mount, which Iris cannot check"]
        return self._bind_refusals(str(mount.get("Source") or ""), destination)

    def _volume_refusals(self, mount: Mapping[str, Any], destination: str) -> list[str]:
        name = str(mount.get("Name") or "")
        details = self.volume(name) if name else {}
        driver = str(details.get("Driver") or mount.get("Driver") or "")
        options = {str(k): str(v) for k, v in (details.get("Options") or {}).items()}
        if driver != "local":
            return [f"{destination} is a volume of the {driver or 'unknown'} driver"]
        if "device" in options or "bind" in options.get("o", "").split(","):
            return [f"{destination} is a volume that binds the host's {options.get('device')}"]
        return []

    def _bind_refusals(self, source: str, destination: str) -> list[str]:
        host = _real(Path(source))
        if host is None:
            return [f"{destination} shows {source}, which Iris cannot resolve as its own user"]
        if destination == INSIDE_WORKSPACE:
            return []  # it must be the work folder: view_of says so, more plainly
        identity = any(host.is_relative_to(self.data / n) for n in IDENTITY)
        if identity and _under(destination, INSIDE_AGENT):
            return []
        if self.data.is_relative_to(host):
            return [f"{destination} shows Iris's data folder ({source})"]
        if host.is_relative_to(self.work):
            return [f"{destination} shows {source} inside the work folder (commands can swap it)"]
        if host.is_relative_to(self.data):
            return [f"{destination} shows {source}, inside Iris's data folder"]
        if _holds_engine_socket(host, self.sockets):
            return [f"{destination} shows the container engine's socket ({source})"]
        if any(host.is_relative_to(allowed) for allowed in self.extra):
            return []
        return [
            f"{destination} shows the host's {source}: only the work folder at "
            f"{INSIDE_WORKSPACE}, the identity files read-only under {INSIDE_AGENT} and "
            f"{ALLOWED_BINDS_VARIABLE} may be bound"
        ]


def _holds_engine_socket(host: Path, sockets: list[Path]) -> bool:
    try:
        if stat.S_ISSOCK(host.stat().st_mode):
            return True
    except OSError:
        return True  # cannot tell: treat as one
    return any(socket.is_relative_to(host) for socket in sockets)


def view_of(info: Mapping[str, Any], container: str, work: Path) -> WorkspaceView:
    """The work folder at /workspace (required) and the read-only binds under /agent."""
    binds = [m for m in info.get("Mounts") or [] if m.get("Type") == "bind" and m.get("Source")]
    by_destination = {str(m.get("Destination")): Path(str(m["Source"])) for m in binds}
    source = by_destination.get(INSIDE_WORKSPACE)
    if source is None or _real(source) != _real(work):
        raise ValueError(
            f"container {container!r} must show the work folder at {INSIDE_WORKSPACE}: "
            f"start it with -v {work}:{INSIDE_WORKSPACE}"
        )
    extras = tuple(
        Mount(host, dest, writable=False)
        for dest, host in by_destination.items()
        if _under(dest, INSIDE_AGENT) and dest != INSIDE_AGENT
    )
    return WorkspaceView(Mount(work, INSIDE_WORKSPACE, writable=True), extras)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _real(path: Path) -> Path | None:
    """The path with every link resolved, or None where Iris cannot resolve it (a folder it
    may not search): an unresolved path would fail open."""
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError:
        return None

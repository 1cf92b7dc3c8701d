"""What every sandbox level provides: a view of the workspace, a way to launch a command in it,
and a check that it can run here.

The bash tool starts ``Launch.argv`` on the host as its own process group and kills that group on
timeout or Stop; a level whose processes escape the group (a container's, a VM's) also names a
``kill`` that reaches them, and a ``cleanup`` for what one run leaves behind (a bundle, a chroot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from iris_runtime.errors import IrisError

# Where the work folder appears inside every level but host, and where the agent's identity
# files (read-only) appear beside it.
INSIDE_WORKSPACE = "/workspace"
INSIDE_AGENT = "/agent"
# The uid and gid a sandboxed command runs as (bubblewrap, gVisor, the Firecracker jailer).
SANDBOX_UID = 10000
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxUnavailable(IrisError):
    """The chosen level cannot run here (a missing binary, device, image, container or kernel),
    or its probe showed the host. Iris refuses to start rather than run commands less isolated
    than configured."""

    code = "sandbox_unavailable"
    status = 503


@dataclass(frozen=True)
class Launch:
    """How to start one command: ``argv`` runs on the host, in ``cwd``, with exactly ``env``."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    kill: Callable[[], None] | None = None  # also reaches what the process group does not
    cleanup: Callable[[], None] | None = None  # after the command ended, whatever the reason
    # Descriptors the process inherits (a lease it must hold for as long as it lives).
    pass_fds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Mount:
    """A host path seen at ``inside`` in the sandbox."""

    host: Path
    inside: str
    writable: bool


@dataclass(frozen=True)
class WorkspaceView:
    """The folders a level shows its commands, and so the only ones the file tools may touch.

    ``root`` is the work folder: relative paths start there, ``write`` and ``edit`` only go
    there. ``extras`` are read-only (the agent's identity, memory and skills)."""

    root: Mount
    extras: tuple[Mount, ...] = ()

    @property
    def mounts(self) -> tuple[Mount, ...]:
        return (self.root, *self.extras)


class Sandbox(Protocol):
    """An isolation level opened for one Iris (see ``register_sandboxes``)."""

    level: str  # the level as configured, e.g. "namespace:net"
    view: WorkspaceView
    # Whether the level claims a boundary; only then may its probe refuse it (host does not).
    isolated: bool
    # Whether the probe must see no network interface but loopback.
    isolates_network: bool

    def check(self) -> None:
        """Raise :class:`SandboxUnavailable` with the reason when the level cannot run here."""

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        """How to run ``argv`` (a list, never a shell string) in ``cwd`` (a path as the command
        sees it) with ``env`` (the variables the command sees, nothing more)."""
        ...


@dataclass(frozen=True)
class RunSecrets:
    """How a sandboxed command reaches the secret broker: its URL, and the names a run's
    short-lived token may read (the agent's skills' declared ``secrets:``)."""

    broker_url: str
    names: Callable[[], Iterable[str]]


@dataclass(frozen=True)
class SandboxSpec:
    """What a level's factory gets: the option after ``level:`` and where Iris keeps data."""

    level: str
    option: str | None
    data_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    # Set where this process hosts the broker; a level keeps it as ``run_secrets``.
    run_secrets: RunSecrets | None = None

    @property
    def configured(self) -> str:
        return f"{self.level}:{self.option}" if self.option else self.level


def no_option(spec: SandboxSpec) -> None:
    if spec.option:
        raise SandboxUnavailable(f"sandbox level {spec.level!r} takes no option ({spec.option!r})")

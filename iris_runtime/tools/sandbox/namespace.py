"""The ``namespace`` level: bubblewrap (``bwrap``) puts each command in new user, pid, ipc, uts,
network and mount namespaces.

Inside, the command is uid 10000 on a read-only root built from the host's system folders, with
a private ``/tmp``, the work folder writable at ``/workspace`` and the agent's identity files
read-only under ``/agent``; nothing else of the host's file system exists there. It has only a
loopback interface unless the level is ``namespace:net``, and dies with its parent (bwrap's
``--die-with-parent`` plus the pid namespace: when its init goes, everything it started goes).

The user namespace maps uid 10000 to Iris's own uid on the host, so the level is refused when
Iris runs as root: the host would check the command's file accesses as root.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from iris_runtime.tools.sandbox.base import (
    SANDBOX_UID,
    Launch,
    SandboxSpec,
    SandboxUnavailable,
)
from iris_runtime.tools.sandbox.view import (
    ensure_work_folder,
    present,
    prompt_section,
    sandboxed_view,
    work_folder,
)

# Host folders shown read-only, when they exist. /etc holds what programs need to run (ld.so
# cache, passwd, resolv.conf, certificates); Iris keeps nothing of its own there.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
OPTIONS = ("net",)
ROOT_REFUSAL = (
    "the namespace level refuses to run while Iris runs as root: bubblewrap maps the command's "
    "uid to Iris's own, so the host would check its file permissions as root (/etc/shadow, host "
    "keys, TLS keys). Run Iris as an unprivileged user, or choose gvisor"
)


class NamespaceSandbox:
    isolated = True

    def __init__(self, spec: SandboxSpec, bwrap: str | None) -> None:
        if spec.option not in (None, *OPTIONS):
            raise SandboxUnavailable(
                f"unknown namespace option {spec.option!r} (use namespace or namespace:net)"
            )
        self.level = spec.configured
        self.run_secrets = spec.run_secrets
        self.isolates_network = spec.option != "net"
        self._bwrap = bwrap
        self.view = sandboxed_view(spec.data_dir, work_folder(spec.data_dir))

    def prompt_section(self) -> str:
        return prompt_section(self.level, self.view)

    def check(self) -> None:
        if self._bwrap is None:
            raise SandboxUnavailable(
                "the namespace level needs bubblewrap: bwrap is not on PATH "
                "(Debian: apt-get install bubblewrap)"
            )
        if os.geteuid() == 0:
            raise SandboxUnavailable(ROOT_REFUSAL)
        ensure_work_folder(self.view)

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        self.check()
        assert self._bwrap is not None
        return Launch(
            [self._bwrap, *self.bwrap_args(cwd), "--", *argv], self.view.root.host, dict(env)
        )

    def bwrap_args(self, cwd: str) -> list[str]:
        args = [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",  # no TIOCSTI into Iris's terminal
            # No user namespaces of the command's own: the kernel's user-namespace code stays
            # out of its reach (and a systemd agent's unit allows them for bwrap alone).
            "--disable-userns",
            "--assert-userns-disabled",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
        ]
        if self.isolates_network:
            args.append("--unshare-net")
        for folder in SYSTEM_FOLDERS:
            if Path(folder).is_symlink():  # merged /usr: /bin -> usr/bin
                args += ["--symlink", str(Path(folder).readlink()), folder]
            elif Path(folder).is_dir():
                args += ["--ro-bind", folder, folder]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108 (a private tmpfs)
        args += ["--bind", str(self.view.root.host), self.view.root.inside]
        for mount in present(self.view.extras):
            args += ["--ro-bind", str(mount.host), mount.inside]
        # Last: everything above is mounted, now the root itself turns read-only.
        args += ["--remount-ro", "/", "--chdir", cwd]
        return args


def open_namespace(spec: SandboxSpec) -> NamespaceSandbox:
    return NamespaceSandbox(spec, shutil.which("bwrap"))

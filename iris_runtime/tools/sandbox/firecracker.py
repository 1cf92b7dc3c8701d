"""The ``firecracker`` level: a microVM per run, defended in depth — the KVM boundary, the
minimal Firecracker VMM, its jailer (chroot, uid 10000, seccomp), a /30 TAP network per VM
(``firecracker:net``; none otherwise) and a copy of the configured rootfs destroyed with the VM.

The workspace is copied in (a read-only tar drive) and the guest's copy back out when the
command ends; the command's output is the guest's console. Configured by:
``IRIS_FIRECRACKER_KERNEL`` and ``IRIS_FIRECRACKER_ROOTFS`` (required; the rootfs must hold
``/sbin/iris-init``, see :data:`GUEST_INIT_SCRIPT`), ``IRIS_FIRECRACKER_BIN`` and
``IRIS_JAILER_BIN`` (default: on PATH), ``IRIS_FIRECRACKER_CHROOT_BASE`` (``/srv/jailer``),
``IRIS_FIRECRACKER_SUBNET`` (``172.30.0.0/16``, one /30 per VM, leased host-wide under
``IRIS_FIRECRACKER_TAP_LOCKS``, see ``firecracker_taps``), ``IRIS_FIRECRACKER_MEM_MIB``.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.tools.sandbox.base import Launch, SandboxSpec, SandboxUnavailable
from iris_runtime.tools.sandbox.firecracker_plan import (
    DEFAULT_CHROOT_BASE,
    DEFAULT_SUBNET,
    TapPlan,
    VmPlan,
)
from iris_runtime.tools.sandbox.firecracker_run import tear_down
from iris_runtime.tools.sandbox.firecracker_taps import DEFAULT_LOCK_DIR, TapAllocator, TapLease
from iris_runtime.tools.sandbox.view import (
    ensure_work_folder,
    prompt_section,
    sandboxed_view,
    work_folder,
)

# What the rootfs runs as init: unpack the workspace drive, rebuild argv and the environment
# from one file each (no shell parsing of the command), run it on the console, pack the
# workspace and the exit code into the out drive, and power off.
GUEST_INIT_SCRIPT = r"""#!/bin/sh
mount -t proc proc /proc 2>/dev/null
mkdir -p /workspace && tar -xf /dev/vdb -C /workspace && cd /workspace || exit 1
chown -R 10000:10000 /workspace
for f in .iris-run/env/*; do [ -e "$f" ] && export "${f##*/}=$(cat "$f")"; done
set --; i=0
while [ -e ".iris-run/argv/$i" ]; do
  a="$(cat ".iris-run/argv/$i"; echo x)"; set -- "$@" "${a%x}"; i=$((i+1))
done
rm -rf .iris-run
# The command runs as uid 10000 in the guest too; without setpriv it would run as root, and
# the start-up probe refuses the level.
command -v setpriv >/dev/null && set -- setpriv --reuid=10000 --regid=10000 --clear-groups -- "$@"
"$@" </dev/null >/dev/ttyS0 2>&1; echo $? > .iris-exit
tar -cf /dev/vdc -C /workspace . ; sync
reboot -f || echo b > /proc/sysrq-trigger
"""


class FirecrackerSandbox:
    isolated = True
    isolates_network = True

    def __init__(self, spec: SandboxSpec) -> None:
        if spec.option not in (None, "net"):
            raise SandboxUnavailable(
                f"unknown firecracker option {spec.option!r} (use firecracker or firecracker:net)"
            )
        env = spec.env
        self.level = spec.configured
        self.run_secrets = spec.run_secrets
        self.networked = spec.option == "net"
        self.isolates_network = not self.networked
        self.view = sandboxed_view(spec.data_dir, work_folder(spec.data_dir))
        self._firecracker = env.get("IRIS_FIRECRACKER_BIN") or shutil.which("firecracker")
        self._jailer = env.get("IRIS_JAILER_BIN") or shutil.which("jailer")
        # Absolute from here on: the VM's helper runs in the workspace, and changes folder.
        self._kernel = _absolute(env.get("IRIS_FIRECRACKER_KERNEL", ""))
        self._rootfs = _absolute(env.get("IRIS_FIRECRACKER_ROOTFS", ""))
        self._chroot_base = _absolute(
            env.get("IRIS_FIRECRACKER_CHROOT_BASE") or DEFAULT_CHROOT_BASE
        )
        subnet = env.get("IRIS_FIRECRACKER_SUBNET") or DEFAULT_SUBNET
        try:
            self._taps = TapAllocator(
                subnet, Path(env.get("IRIS_FIRECRACKER_TAP_LOCKS") or DEFAULT_LOCK_DIR)
            )
        except ValueError as exc:
            raise SandboxUnavailable(f"IRIS_FIRECRACKER_SUBNET={subnet!r}: {exc}") from None
        self._mem_mib = int(env.get("IRIS_FIRECRACKER_MEM_MIB") or 512)
        self._plans = spec.data_dir / data_layout.RUN_DIR / "firecracker"

    def prompt_section(self) -> str:
        return prompt_section(self.level, self.view) + (
            " Each command runs in a fresh microVM: only the workspace is kept between commands."
        )

    def check(self) -> None:
        ensure_work_folder(self.view)
        for what, path in (("firecracker", self._firecracker), ("jailer", self._jailer)):
            if not path or not os.access(path, os.X_OK):
                raise SandboxUnavailable(
                    f"the firecracker level needs {what} (IRIS_{what.upper()}_BIN or on PATH)"
                    if what == "jailer"
                    else "the firecracker level needs firecracker (IRIS_FIRECRACKER_BIN or PATH)"
                )
        for variable, path in (
            ("IRIS_FIRECRACKER_KERNEL", self._kernel),
            ("IRIS_FIRECRACKER_ROOTFS", self._rootfs),
        ):
            if not path or not Path(path).is_file():
                raise SandboxUnavailable(f"{variable} must name a file (got {path!r})")
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            raise SandboxUnavailable("the firecracker level needs /dev/kvm (read and write)")
        if os.geteuid() != 0:
            raise SandboxUnavailable("the firecracker jailer runs as root; Iris is not root")
        self._plans.mkdir(mode=0o700, parents=True, exist_ok=True)

    def plan(self, argv: list[str], env: Mapping[str, str], tap: TapPlan | None) -> VmPlan:
        assert self._firecracker and self._jailer
        return VmPlan(
            vm_id=f"iris-{uuid.uuid4().hex[:12]}",
            firecracker=self._firecracker,
            jailer=self._jailer,
            kernel=self._kernel,
            rootfs=self._rootfs,
            chroot_base=self._chroot_base,
            workspace=str(self.view.root.host),
            argv=list(argv),
            env=dict(env),
            tap=tap,
            mem_mib=self._mem_mib,
        )

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        lease = self._taps.lease() if self.networked else None
        try:
            plan = self.plan(argv, env, lease.tap if lease else None)
            plan_file = self._plans / f"{plan.vm_id}.json"
            fd = os.open(plan_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(plan.to_json())
        except BaseException:
            _release(lease)
            raise
        helper = [sys.executable, "-m", "iris_runtime.tools.sandbox.firecracker_run"]

        def cleanup() -> None:  # also when the helper was killed before its own cleanup
            try:
                tear_down(plan)
                plan_file.unlink(missing_ok=True)
            finally:
                _release(lease)  # the helper, if it still lives, holds the lease on

        return Launch(
            [*helper, str(plan_file)],
            self.view.root.host,
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            cleanup=cleanup,
            # The helper holds the lease too, for as long as its VM and device live.
            pass_fds=(lease.fd,) if lease and lease.fd is not None else (),
        )


def _absolute(path: str) -> str:
    """``path`` made absolute against Iris's own folder; empty stays empty."""
    return os.path.abspath(path) if path else ""


def _release(lease: TapLease | None) -> None:
    if lease is not None:
        lease.release()


def open_firecracker(spec: SandboxSpec) -> FirecrackerSandbox:
    return FirecrackerSandbox(spec)

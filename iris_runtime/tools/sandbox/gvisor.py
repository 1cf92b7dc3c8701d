"""The ``gvisor`` level: gVisor's ``runsc`` runs each command as an OCI container whose system
calls go to a user-space kernel (the Sentry), not to the host's.

Each run gets its own bundle: an empty read-only root with the host's system folders bound
read-only, a private ``/tmp``, the work folder at ``/workspace`` and the agent's identity files
read-only under ``/agent``; uid 10000, no network (``--network=none``). The platform is
``ptrace`` or ``kvm`` (``gvisor:ptrace``, ``gvisor:kvm``); plain ``gvisor`` uses ``kvm`` when a
trial run on it succeeds and ``ptrace`` otherwise, and says which. runsc must run as root.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.tools.sandbox.base import (
    SANDBOX_PATH,
    SANDBOX_UID,
    Launch,
    SandboxSpec,
    SandboxUnavailable,
)
from iris_runtime.tools.sandbox.namespace import SYSTEM_FOLDERS
from iris_runtime.tools.sandbox.view import (
    ensure_work_folder,
    present,
    prompt_section,
    sandboxed_view,
    work_folder,
)

log = logging.getLogger(__name__)

PLATFORMS = ("ptrace", "kvm")
_TRIAL_SECONDS = 5.0  # a kvm platform that cannot work here hangs rather than failing
_DETECTION_TTL_SECONDS = 600.0


class GvisorSandbox:
    isolated = True
    # The uid its commands write as on the host: the file tools hand what they make to it.
    command_uid = SANDBOX_UID
    isolates_network = True

    def __init__(self, spec: SandboxSpec, runsc: str | None) -> None:
        if spec.option not in (None, *PLATFORMS):
            raise SandboxUnavailable(
                f"unknown gVisor platform {spec.option!r} (use gvisor, gvisor:ptrace or gvisor:kvm)"
            )
        self.level = spec.configured
        self.run_secrets = spec.run_secrets
        self.platform: str | None = spec.option
        self._runsc = runsc
        self._state = spec.data_dir / data_layout.RUN_DIR / "gvisor"
        self.view = sandboxed_view(spec.data_dir, work_folder(spec.data_dir))

    def prompt_section(self) -> str:
        return prompt_section(self.level, self.view)

    def check(self) -> None:
        ensure_work_folder(self.view, SANDBOX_UID)
        if self._runsc is None:
            raise SandboxUnavailable(
                "the gvisor level needs runsc: it is not on PATH (Debian: apt-get install runsc)"
            )
        if os.geteuid() != 0:
            raise SandboxUnavailable("the gvisor level runs runsc as root; Iris is not root")
        self._state.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.platform is None:
            self.platform = self._detect_platform()
            log.info("gvisor: using the %s platform", self.platform)

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        self.check()
        name = f"iris-{uuid.uuid4().hex[:12]}"
        bundle = self._state / "bundles" / name
        bundle.mkdir(mode=0o700, parents=True)
        (bundle / "rootfs").mkdir(mode=0o755)  # the command's "/": uid 10000 must traverse it
        config = self.oci_config(argv, cwd, env)
        # 0600: the command's environment may hold its run token.
        fd = os.open(bundle / "config.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(config))
        command = [*self._runsc_base(), "run", "--bundle", str(bundle), name]
        return Launch(
            command,
            bundle,
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            kill=lambda: self._delete(name),
            cleanup=lambda: self._cleanup(name, bundle),
        )

    def oci_config(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> dict[str, Any]:
        mounts: list[dict[str, Any]] = [
            _bind(folder, folder, writable=False)
            for folder in SYSTEM_FOLDERS
            if Path(folder).is_dir()
        ]
        mounts += [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},  # noqa: S108 (private)
        ]
        mounts += [_bind(str(m.host), m.inside, m.writable) for m in present(self.view.mounts)]
        return {
            "ociVersion": "1.0.0",
            "process": {
                "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID},
                "args": _absolute(argv),
                "env": [f"{k}={v}" for k, v in env.items()],
                "cwd": cwd,
                "terminal": False,
            },
            "root": {"path": "rootfs", "readonly": True},
            "hostname": "sandbox",
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]
            },
        }

    def _runsc_base(self, platform: str | None = None) -> list[str]:
        assert self._runsc is not None
        return [
            self._runsc,
            f"--root={self._state / 'state'}",
            "--network=none",
            f"--platform={platform or self.platform}",
        ]

    def _detect_platform(self) -> str:
        """kvm when a trial run on it succeeds, else ptrace. The answer is kept a while in the
        state folder: `iris serve` detects in its master, and the worker must not wait again."""
        cache = self._state / "platform"
        with contextlib.suppress(OSError):
            if time.time() - cache.stat().st_mtime < _DETECTION_TTL_SECONDS:
                kept = cache.read_text(encoding="utf-8").strip()
                if kept in PLATFORMS:
                    return kept
        platform = self._trial_platform()
        with contextlib.suppress(OSError):
            cache.write_text(platform, encoding="utf-8")
        return platform

    def _trial_platform(self) -> str:
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return "ptrace"
        trial = [*self._runsc_base("kvm"), "do", "true"]
        try:
            done = subprocess.run(trial, capture_output=True, timeout=_TRIAL_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            return "ptrace"
        return "kvm" if done.returncode == 0 else "ptrace"

    def _delete(self, name: str) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [*self._runsc_base(), "delete", "--force", name],
                capture_output=True,
                timeout=30,
                check=False,
            )

    def _cleanup(self, name: str, bundle: Path) -> None:
        self._delete(name)
        shutil.rmtree(bundle, ignore_errors=True)


def _absolute(argv: list[str]) -> list[str]:
    """runsc looks the program up before the bind mounts exist: give it the path. The system
    folders are the host's, so the host's lookup finds the same file."""
    if not argv or "/" in argv[0]:
        return list(argv)
    return [shutil.which(argv[0], path=SANDBOX_PATH) or argv[0], *argv[1:]]


def _bind(source: str, destination: str, writable: bool) -> dict[str, Any]:
    return {
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": ["rbind", "rw" if writable else "ro"],
    }


def open_gvisor(spec: SandboxSpec) -> GvisorSandbox:
    return GvisorSandbox(spec, shutil.which("runsc"))

"""The boundary probe: a command run inside the chosen level that reports what a command there
sees, so Iris proves its boundary at run time instead of trusting its configuration.

It checks, too, whether a root-only file (/etc/shadow) is readable: then the host checks the
command's file permissions as root (a user namespace mapping it to host root), and the level is
refused.

It runs at start-up (``iris serve`` refuses a level whose probe shows the host) and on
``iris doctor --sandbox``. It reports the uid, the hostname, the network interfaces, and whether
``/``, the workspace and Iris's data folder are writable or visible.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import SANDBOX_PATH, Launch, Sandbox, SandboxUnavailable

PROBE_SECONDS = 60.0
# $1 is the host's data folder. POSIX sh, /proc and a few coreutils: every level has those.
PROBE_SCRIPT = r"""
echo "uid=$(id -u)"
if head -c 1 /etc/shadow >/dev/null 2>&1; then echo root_files_readable=yes;
else echo root_files_readable=no; fi
echo "hostname=$(cat /proc/sys/kernel/hostname 2>/dev/null)"
echo "interfaces=$(tail -n +3 /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' ' | tr '\n' ,)"
if ( : > /.iris-probe ) 2>/dev/null; then rm -f /.iris-probe; echo root_writable=yes;
else echo root_writable=no; fi
if ( : > ./.iris-probe ) 2>/dev/null; then rm -f ./.iris-probe; echo workspace_writable=yes;
else echo workspace_writable=no; fi
if [ -e "$1" ]; then echo data_dir_visible=yes; else echo data_dir_visible=no; fi
"""


@dataclass(frozen=True)
class ProbeReport:
    level: str
    uid: int
    hostname: str
    interfaces: tuple[str, ...]
    root_writable: bool
    workspace_writable: bool
    data_dir_visible: bool
    # Whether a root-only file (/etc/shadow) is readable: the command is root to the host's
    # permission checks (a user namespace mapping it to host root). /proc/self/uid_map cannot
    # tell: bubblewrap nests a second user namespace whose "0" is Iris's own uid.
    root_files_readable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        nets = ",".join(self.interfaces) or "none"
        return (
            f"uid {self.uid}, hostname {self.hostname}, interfaces {nets}, "
            f"/ {'writable' if self.root_writable else 'read-only'}, "
            f"workspace {'writable' if self.workspace_writable else 'read-only'}, "
            f"data folder {'VISIBLE' if self.data_dir_visible else 'not visible'}"
        )


def problems(report: ProbeReport, sandbox: Sandbox, iris_uid: int) -> list[str]:
    """Why the probe shows the host rather than a sandbox (empty when it does not)."""
    if not sandbox.isolated:  # host, or a plugin level that only wraps the command line
        return []
    found: list[str] = []
    if report.uid == iris_uid:
        found.append(f"the command runs as Iris's own uid {iris_uid}")
    if report.root_files_readable:
        found.append(
            "the command can read root-only files (/etc/shadow): the host checks its file "
            "permissions as root (run Iris as an unprivileged user)"
        )
    if report.data_dir_visible:
        found.append("Iris's data folder is visible inside")
    extra = [name for name in report.interfaces if name != "lo"]
    if sandbox.isolates_network and extra:
        found.append(f"network interfaces {', '.join(extra)} exist where none was asked for")
    if not report.workspace_writable:
        found.append("the workspace is not writable inside")
    return found


def run_probe(sandbox: Sandbox, data_dir: Path) -> ProbeReport:
    """Run the probe in ``sandbox``; raise SandboxUnavailable when it cannot run there."""
    env = {"PATH": SANDBOX_PATH, "HOME": sandbox.view.root.inside, "LANG": "C.UTF-8"}
    argv = ["sh", "-c", PROBE_SCRIPT, "iris-probe", str(data_dir)]
    launch = sandbox.launch(argv, sandbox.view.root.inside, env)
    try:
        output = _output_of(launch)
    finally:
        if launch.cleanup is not None:
            launch.cleanup()
    return parse(sandbox.level, output)


def _output_of(launch: Launch) -> str:
    try:
        proc = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            pass_fds=launch.pass_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise SandboxUnavailable(f"the probe could not start: {exc}") from None
    try:
        out, err = proc.communicate(timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if launch.kill is not None:
            launch.kill()
        _, err = proc.communicate()
        raise SandboxUnavailable(
            f"the probe did not finish within {PROBE_SECONDS:g}s: {err.strip()[-500:]}"
        ) from None
    if proc.returncode != 0:
        detail = (err.strip() or out.strip())[-500:]
        raise SandboxUnavailable(f"the probe failed (exit {proc.returncode}): {detail}")
    return out


def parse(level: str, output: str) -> ProbeReport:
    fields = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    try:
        return ProbeReport(
            level=level,
            uid=int(fields["uid"]),
            hostname=fields.get("hostname", ""),
            interfaces=tuple(n for n in fields.get("interfaces", "").split(",") if n),
            root_writable=fields["root_writable"] == "yes",
            workspace_writable=fields["workspace_writable"] == "yes",
            data_dir_visible=fields["data_dir_visible"] == "yes",
            root_files_readable=fields.get("root_files_readable") == "yes",
        )
    except (KeyError, ValueError):
        raise SandboxUnavailable(
            f"the probe printed something unexpected: {output[-300:]!r}"
        ) from None

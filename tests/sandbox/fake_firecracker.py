"""A stand-in for Firecracker and its jailer: this machine is itself a nested microVM on which
no stock kernel boots, so the VMM is played by a process that speaks Firecracker's HTTP API on
its Unix socket, records every request, and on ``InstanceStart`` "boots" the guest by running
Iris's real guest init script in a bubblewrap sandbox with the VM's drives at /dev/vdb and
/dev/vdc. What the tests check is what Iris asks of Firecracker and the jailer, and the run's
plumbing (rootfs copy and removal, workspace in and out, exit code), never a real VM.

Usage: ``fake_firecracker.py jailer <record> <jailer argv...>`` (the jailer: records its argv,
makes the chroot and starts the VMM there, without chrooting or dropping privileges) and
``fake_firecracker.py firecracker <record> --api-sock <path>`` (the VMM).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

from iris_runtime.tools.sandbox.firecracker import GUEST_INIT_SCRIPT

# Fields Firecracker requires on each resource (its swagger: the rest are optional).
REQUIRED = {
    "/machine-config": {"vcpu_count", "mem_size_mib"},
    "/boot-source": {"kernel_image_path"},
    "/drives/": {"drive_id", "path_on_host", "is_root_device"},
    "/network-interfaces/": {"iface_id", "host_dev_name"},
    "/actions": {"action_type"},
}


def record(path: str, entry: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def jailer(record_path: str, argv: list[str]) -> None:
    record(record_path, {"jailer_argv": argv, "uid": os.geteuid()})
    option = {
        argv[i]: argv[i + 1] for i in range(0, argv.index("--") - 1) if argv[i].startswith("--")
    }
    exec_file = option["--exec-file"]
    root = Path(option["--chroot-base-dir"]) / Path(exec_file).name / option["--id"] / "root"
    record(record_path, {"chroot_files": sorted(p.name for p in root.iterdir())})
    in_drive = (root / "workspace-in.tar").stat()
    record(record_path, {"in_drive": [in_drive.st_mode & 0o777, in_drive.st_uid]})
    os.chdir(root)
    vmm = argv[argv.index("--") + 1 :]
    os.execv(exec_file, [exec_file, *vmm])


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    record_path = ""
    config: ClassVar[dict[str, Any]] = {}  # one server per process
    guest: threading.Thread | None = None


class _Api(BaseHTTPRequestHandler):
    server: _Server

    def do_PUT(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        record(self.server.record_path, {"method": "PUT", "path": self.path, "body": body})
        prefix = next(
            (
                p
                for p in REQUIRED
                if self.path == p or (p.endswith("/") and self.path.startswith(p))
            ),
            None,
        )
        missing = REQUIRED[prefix] - set(body) if prefix else {"(unknown resource)"}
        if missing:
            self._answer(400, {"fault_message": f"missing {sorted(missing)}"})
            return
        self.server.config[self.path] = body
        if self.path == "/actions" and body["action_type"] == "InstanceStart":
            self.server.guest = threading.Thread(target=_boot, args=(self.server,))
            self.server.guest.start()
        self._answer(204, None)

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:  # nothing after a 204: the client may have closed already
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _drive(config: dict[str, Any], drive_id: str) -> str:
    return str(Path.cwd() / config[f"/drives/{drive_id}"]["path_on_host"])


def _boot(server: _Server) -> None:
    try:
        _run_guest(server.config)
    except Exception as exc:  # recorded: the test shows why, and the VMM still exits
        record(server.record_path, {"guest_error": repr(exc)})
    finally:
        os._exit(0)  # the guest rebooted: Firecracker exits, as the real one does


def _run_guest(config: dict[str, Any]) -> None:
    """The guest: Iris's init script with the drives where the VM would have them."""
    script = GUEST_INIT_SCRIPT.replace("/dev/ttyS0", "/dev/stdout")
    # The stand-in's guest shares the host's kernel: it ends by exiting, never by a reboot.
    script = re.sub(r"(?m)^reboot .*$", "exit 0", script)
    assert "reboot" not in script and "sysrq" not in script
    command = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    command += ["--hostname", "microvm", "--die-with-parent"]
    for folder in ("/usr", "/etc"):
        command += ["--ro-bind", folder, folder]
    for link in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            command += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    command += ["--bind", _drive(config, "workspace_in"), "/dev/vdb"]
    command += ["--bind", _drive(config, "workspace_out"), "/dev/vdc"]
    subprocess.run([*command, "/bin/sh", "-c", script], check=False)


def firecracker(record_path: str, argv: list[str]) -> None:
    socket_path = argv[argv.index("--api-sock") + 1].lstrip("/")
    record(record_path, {"firecracker_argv": argv, "cwd": os.getcwd()})
    server = _Server(socket_path, _Api, bind_and_activate=False)
    server.record_path = record_path
    server.server_bind()  # the socket file exists from here on...
    time.sleep(float(os.environ.get("FAKE_FIRECRACKER_LISTEN_DELAY", "0")))
    server.server_activate()  # ...but connections are refused until it listens
    server.serve_forever()


if __name__ == "__main__":
    role, record_file, *rest = sys.argv[1:]
    jailer(record_file, rest) if role == "jailer" else firecracker(record_file, rest)


def install(folder: Path, record_file: Path, listen_delay: float = 0.0) -> tuple[Path, Path]:
    """Executables ``firecracker`` and ``jailer`` in ``folder`` running this stand-in; the VMM
    listens ``listen_delay`` seconds after its socket file appears (a loaded host's gap)."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for role in ("jailer", "firecracker"):
        exe = folder / role
        exe.write_text(
            f"#!/bin/sh\nexport FAKE_FIRECRACKER_LISTEN_DELAY={listen_delay}\n"
            f"exec {sys.executable} {Path(__file__).resolve()} {role} "
            f'{record_file} "$@"\n'
        )
        exe.chmod(0o755)
        made.append(exe)
    assert shutil.which("bwrap"), "the stand-in boots its guest with bubblewrap"
    return made[0], made[1]

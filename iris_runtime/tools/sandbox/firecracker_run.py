"""One Firecracker run, as a helper process the bash tool starts and can kill as a group:
``python -m iris_runtime.tools.sandbox.firecracker_run <plan.json>``.

It prepares the jail (a copy of the rootfs, the kernel, the workspace as a tar drive), creates
the /30 TAP device when the plan has one, starts the jailer (which chroots, drops to uid 10000
and execs Firecracker with its default seccomp filters), configures and boots the VM through the
API socket, relays the guest's console to its own stdout (the command's output), copies the
guest's workspace back, and destroys the jail and the TAP device: the rootfs copy never
outlives the VM. Its exit code is the command's.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from types import FrameType

from iris_runtime.errors import InvalidInput
from iris_runtime.tools.sandbox import firecracker_api
from iris_runtime.tools.sandbox.base import SandboxUnavailable
from iris_runtime.tools.sandbox.firecracker_plan import (
    IN_DRIVE,
    KERNEL_NAME,
    OUT_DRIVE,
    ROOTFS_NAME,
    VmPlan,
)
from iris_runtime.tools.workspace import parent_folder

EXIT_FILE = ".iris-exit"
RUN_FOLDER = ".iris-run"
_SOCKET_SECONDS = 10.0
_OUT_DRIVE_MIN = 64 << 20


def prepare_jail(plan: VmPlan) -> None:
    """The chroot's files, owned by the uid Firecracker runs as."""
    root = plan.chroot
    (root / "run").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plan.rootfs, root / ROOTFS_NAME)  # the VM's own copy, destroyed with it
    shutil.copyfile(plan.kernel, root / KERNEL_NAME)
    # 0600 and Firecracker's: the in-drive holds the command's environment (its run token).
    os.close(os.open(root / IN_DRIVE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    size = _write_in_drive(plan, root / IN_DRIVE)
    with open(root / OUT_DRIVE, "wb") as out:
        out.truncate(max(_OUT_DRIVE_MIN, 2 * size))  # sparse; the guest writes a tar into it
    names = (ROOTFS_NAME, KERNEL_NAME, IN_DRIVE, OUT_DRIVE)
    for path in (root, root / "run", *(root / name for name in names)):
        if os.geteuid() == 0:
            os.chown(path, plan.uid, plan.uid)


def _write_in_drive(plan: VmPlan, drive: Path) -> int:
    """The workspace plus the command: each argument in its own file (argv/0, argv/1, ...) so
    the guest rebuilds the list without any shell parsing; the environment likewise."""
    with tarfile.open(drive, "w") as tar:
        tar.add(plan.workspace, arcname=".")
        for index, arg in enumerate(plan.argv):
            _add_bytes(tar, f"{RUN_FOLDER}/argv/{index}", arg.encode())
        for name, value in plan.env.items():
            _add_bytes(tar, f"{RUN_FOLDER}/env/{name}", value.encode())
    return drive.stat().st_size


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def set_up_tap(plan: VmPlan) -> None:
    if plan.tap is None:
        return
    tap = plan.tap
    for command in (
        ["ip", "tuntap", "add", "dev", tap.device, "mode", "tap", "user", str(plan.uid)],
        ["ip", "addr", "add", f"{tap.host_ip}/30", "dev", tap.device],
        ["ip", "link", "set", tap.device, "up"],
    ):
        subprocess.run(command, check=True, capture_output=True, timeout=30)


def tear_down(plan: VmPlan) -> None:
    """Destroy the jail (the rootfs copy with it) and the TAP device; safe to repeat."""
    shutil.rmtree(plan.chroot.parent, ignore_errors=True)
    if plan.tap is not None:
        subprocess.run(
            ["ip", "link", "del", plan.tap.device], capture_output=True, timeout=30, check=False
        )


def copy_out(plan: VmPlan) -> int:
    """Extract the guest's workspace tar over the work folder; returns the command's exit code.

    The tar comes from the guest, and Iris runs as root: only regular files and folders are
    taken (no links, devices or fifos), names that are absolute or hold ``..`` are skipped, and
    each member is written by ``_extract`` from a descriptor on the work folder without following
    a symlink. tarfile's extraction filters are not relied on (they have had bypasses). An exit
    file that is not a number gives exit code 1; the workspace is still copied back."""
    drive = plan.chroot / OUT_DRIVE
    work = Path(plan.workspace)
    owner = plan.uid if os.geteuid() == 0 else None
    code = 1
    with contextlib.suppress(tarfile.TarError, OSError), tarfile.open(drive) as tar:
        for member in tar:
            parts = _member_parts(member.name)
            if parts == (EXIT_FILE,) and member.isreg():
                code = _exit_code(tar, member)
            elif parts and (member.isreg() or member.isdir()):
                with contextlib.suppress(OSError, InvalidInput):
                    _extract(tar, member, work, parts, owner)
    return code


def _member_parts(name: str) -> tuple[str, ...]:
    """The member's path components, or () for a name Iris does not extract."""
    if name.startswith("/") or "\0" in name:
        return ()
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    return () if ".." in parts else parts


def _exit_code(tar: tarfile.TarFile, member: tarfile.TarInfo) -> int:
    handle = tar.extractfile(member)
    text = handle.read(64).decode(errors="replace").strip() if handle is not None else ""
    try:
        return int(text)
    except ValueError:
        return 1


def _extract(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    work: Path,
    parts: tuple[str, ...],
    owner: int | None,
) -> None:
    target = work.resolve().joinpath(*parts)
    with parent_folder(work, target, member.name, create=True) as (folder, name):
        if member.isdir():
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=folder)
            if owner is not None:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
                try:
                    os.fchown(fd, owner, owner)
                finally:
                    os.close(fd)
            return
        source = tar.extractfile(member)
        if source is None:
            return
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                if stat.S_ISDIR(info.st_mode):
                    return  # a folder stays a folder
                os.unlink(name, dir_fd=folder)  # a link or fifo left before: replaced
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=folder)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out)
            os.fchmod(out.fileno(), member.mode & 0o777)
            if owner is not None:
                os.fchown(out.fileno(), owner, owner)


def run(plan: VmPlan) -> int:
    prepare_jail(plan)
    set_up_tap(plan)
    vmm = subprocess.Popen(plan.jailer_argv(), stdin=subprocess.DEVNULL)
    try:
        # A relative name: a deep chroot base would exceed the 108 bytes of a socket address.
        os.chdir(plan.api_socket.parent)
        api_socket = Path(plan.api_socket.name)
        firecracker_api.wait_for_socket(api_socket, _SOCKET_SECONDS, lambda: vmm.poll() is None)
        for method, url, body in plan.api_calls():
            firecracker_api.call(api_socket, method, url, body)
        vmm.wait()  # the guest's init ends → it reboots → Firecracker exits
    finally:
        if vmm.poll() is None:  # configuring failed, or we were stopped: the VM goes too
            vmm.kill()
            vmm.wait()
    return copy_out(plan)


def main(argv: list[str]) -> int:
    plan = VmPlan.from_json(Path(argv[1]).read_text(encoding="utf-8"))

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return run(plan)
    except (SandboxUnavailable, OSError, subprocess.SubprocessError) as exc:
        print(f"firecracker: {exc}", file=sys.stderr)
        return 125
    finally:
        tear_down(plan)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

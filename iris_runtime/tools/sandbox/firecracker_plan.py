"""The plan of one Firecracker run, computed before anything starts: the jailer's argv, the
chroot and its files, the /30 TAP network (or none), and every API call that configures the VM.

Pure data and pure functions, so what Iris would ask of Firecracker is testable anywhere; the
helper process (``firecracker_run``) carries the plan out.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import SANDBOX_UID

API_SOCKET = "run/firecracker.socket"  # inside the chroot
KERNEL_NAME = "vmlinux"
ROOTFS_NAME = "rootfs.ext4"
IN_DRIVE = "workspace-in.tar"
OUT_DRIVE = "workspace-out.tar"
GUEST_INIT = "/sbin/iris-init"
# The guest reboots when its init ends; reboot=k and panic=1 make Firecracker exit then.
BASE_BOOT_ARGS = f"console=ttyS0 reboot=k panic=1 pci=off quiet loglevel=0 init={GUEST_INIT}"
DEFAULT_SUBNET = "172.30.0.0/16"
DEFAULT_CHROOT_BASE = "/srv/jailer"


@dataclass(frozen=True)
class TapPlan:
    """A /30 per VM: the host end, the guest end, nothing else on the link."""

    device: str
    host_ip: str
    guest_ip: str
    netmask: str = "255.255.255.252"
    guest_mac: str = "06:00:ac:1e:00:02"

    def boot_arg(self) -> str:
        # The kernel's own IP autoconfiguration: ip=<client>::<gateway>:<netmask>::<dev>:off
        return f"ip={self.guest_ip}::{self.host_ip}:{self.netmask}::eth0:off"


def tap_plan(subnet: str, index: int) -> TapPlan:
    """The ``index``-th /30 of ``subnet``: .1 is the host's end, .2 the guest's."""
    network = ipaddress.ip_network(subnet)
    blocks = network.num_addresses // 4
    if not 0 <= index < blocks:
        raise ValueError(f"no /30 number {index} in {subnet} ({blocks} in all)")
    base = network.network_address + 4 * index
    mac = f"06:00:{(index >> 16) & 0xFF:02x}:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}:02"
    return TapPlan(f"ifc{index}", str(base + 1), str(base + 2), guest_mac=mac)


@dataclass(frozen=True)
class VmPlan:
    vm_id: str
    firecracker: str
    jailer: str
    kernel: str
    rootfs: str
    chroot_base: str
    workspace: str  # the host's work folder: copied in, and the results copied back
    argv: list[str]
    env: dict[str, str]
    tap: TapPlan | None = None
    vcpus: int = 1
    mem_mib: int = 512
    uid: int = SANDBOX_UID
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def chroot(self) -> Path:
        """Where the jailer chroots: <base>/<exec file name>/<id>/root."""
        return Path(self.chroot_base) / Path(self.firecracker).name / self.vm_id / "root"

    @property
    def api_socket(self) -> Path:
        return self.chroot / API_SOCKET

    def jailer_argv(self) -> list[str]:
        return [
            self.jailer,
            "--id",
            self.vm_id,
            "--exec-file",
            self.firecracker,
            "--uid",
            str(self.uid),
            "--gid",
            str(self.uid),
            "--chroot-base-dir",
            self.chroot_base,
            "--",
            "--api-sock",
            f"/{API_SOCKET}",
            # Firecracker's default seccomp filters stay on: never --no-seccomp.
        ]

    def boot_args(self) -> str:
        return f"{BASE_BOOT_ARGS} {self.tap.boot_arg()}" if self.tap else BASE_BOOT_ARGS

    def api_calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(method, path, body) in order; paths of files are the chroot's."""
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("PUT", "/machine-config", {"vcpu_count": self.vcpus, "mem_size_mib": self.mem_mib}),
            (
                "PUT",
                "/boot-source",
                {"kernel_image_path": KERNEL_NAME, "boot_args": self.boot_args()},
            ),
            ("PUT", "/drives/rootfs", _drive("rootfs", ROOTFS_NAME, root=True, read_only=False)),
            ("PUT", "/drives/workspace_in", _drive("workspace_in", IN_DRIVE, read_only=True)),
            ("PUT", "/drives/workspace_out", _drive("workspace_out", OUT_DRIVE, read_only=False)),
        ]
        if self.tap:
            body = {
                "iface_id": "eth0",
                "host_dev_name": self.tap.device,
                "guest_mac": self.tap.guest_mac,
            }
            calls.append(("PUT", "/network-interfaces/eth0", body))
        calls.append(("PUT", "/actions", {"action_type": "InstanceStart"}))
        return calls

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> VmPlan:
        data = json.loads(text)
        tap = data.pop("tap")
        return cls(**data, tap=TapPlan(**tap) if tap else None)


def _drive(
    drive_id: str, path: str, *, root: bool = False, read_only: bool = False
) -> dict[str, Any]:
    return {
        "drive_id": drive_id,
        "path_on_host": path,
        "is_root_device": root,
        "is_read_only": read_only,
    }

"""Which /30 (and TAP device ``ifcN``) a networked microVM gets: leased across every process on
the host, so Iris and its root sub-agents never hand two VMs the same device (nor, where they
share a subnet, the same addresses).

A lease is an exclusive ``flock`` on ``<lock dir>/ifcN.lock``. Iris takes it and hands the same
descriptor to the VM's helper process, so the lock lasts as long as either lives (the helper
outliving a killed Iris keeps it). The kernel drops it when both are gone, so a crash frees it
without a clean-up step; a device ``ifcN`` still there with its lock free was left by such a
crash, and is deleted and leased again. A device without a lock file is not Iris's and is never
touched. Device names are host-wide, so every Iris on the host shares one lock folder (root's,
mode 0700), whatever its subnet.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.tools.sandbox.base import SandboxUnavailable
from iris_runtime.tools.sandbox.firecracker_plan import TapPlan, tap_plan

DEFAULT_LOCK_DIR = "/run/iris/firecracker-taps"
_NET_CLASS = Path("/sys/class/net")


@dataclass
class TapLease:
    tap: TapPlan
    _fd: int | None

    @property
    def fd(self) -> int | None:
        """The locked descriptor (None once released): the VM's helper inherits it."""
        return self._fd

    def release(self) -> None:
        """Give the /30 back; safe to repeat."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock


class TapAllocator:
    def __init__(self, subnet: str, lock_dir: Path) -> None:
        self._subnet = subnet
        self._blocks = ipaddress.ip_network(subnet).num_addresses // 4
        self._lock_dir = lock_dir
        self._next = 0  # where the next search starts: recently freed numbers rest a while
        self._mutex = threading.Lock()

    def lease(self) -> TapLease:
        """The first free /30 after the last one leased; SandboxUnavailable when none is."""
        self._check_lock_dir()
        with self._mutex:
            for step in range(self._blocks):
                index = (self._next + step) % self._blocks
                fd = self._try_lock(f"ifc{index}")
                if fd is not None:
                    self._next = index + 1
                    return TapLease(tap_plan(self._subnet, index), fd)
        raise SandboxUnavailable(
            f"no free /30 left in {self._subnet} for a networked microVM "
            f"({self._blocks} in all, leased under {self._lock_dir})"
        )

    def _check_lock_dir(self) -> None:
        """Anyone who can write the folder could hold every lock and stop networked VMs."""
        try:
            self._lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(self._lock_dir, follow_symlinks=False)
        except OSError as exc:
            raise SandboxUnavailable(f"TAP lease folder {self._lock_dir}: {exc}") from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise SandboxUnavailable(
                f"TAP lease folder {self._lock_dir} must be a folder of Iris's user with mode "
                "0700 (IRIS_FIRECRACKER_TAP_LOCKS)"
            )

    def _try_lock(self, device: str) -> int | None:
        lock = self._lock_dir / f"{device}.lock"
        known = lock.exists()
        if (_NET_CLASS / device).exists() and not known:
            return None  # not a device Iris made
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(lock, flags, 0o600)
        except OSError as exc:
            raise SandboxUnavailable(f"TAP lease {lock}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if (_NET_CLASS / device).exists() and not _delete_stale(device):
            os.close(fd)
            return None
        return fd


def _delete_stale(device: str) -> bool:
    """A device of Iris's whose lease nobody holds: its VM's helper died with Iris."""
    done = subprocess.run(
        ["ip", "link", "del", device], capture_output=True, timeout=30, check=False
    )
    return done.returncode == 0 and not (_NET_CLASS / device).exists()

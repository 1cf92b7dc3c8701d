"""Which /30 (and TAP device ``ifcN``) a networked microVM gets: leased across every process on
the host, so Iris and its root sub-agents never hand two VMs the same device or addresses.

A lease is an exclusive ``flock`` on ``<lock dir>/ifcN.lock`` held for the VM's life; the kernel
drops it when the holder dies, so a crash frees it without a clean-up step. A device that still
exists (a VM whose helper outlived a killed Iris) is never leased, locked or not. Device names
are host-wide, so every Iris on the host shares one lock folder, whatever its subnet.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
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
        self._lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
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

    def _try_lock(self, device: str) -> int | None:
        if (_NET_CLASS / device).exists():
            return None
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self._lock_dir / f"{device}.lock", flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if (_NET_CLASS / device).exists():  # made while we were locking
            with contextlib.suppress(OSError):
                os.close(fd)
            return None
        return fd

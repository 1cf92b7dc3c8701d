"""A second "host" on this machine: a network namespace joined to this one by a veth link.

Traffic between the two addresses crosses a real link and a real TCP/IP stack on each side, so
what the other end sees is another host's address, not loopback; nothing leaves the machine.
Needs root and iproute2 (``ip``). Names are random, so concurrent tests never collide, and
``close()`` deletes the namespace (which takes its end of the link, and so the link, with it).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from types import TracebackType


class NetnsError(RuntimeError):
    pass


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


class NetNamespace:
    """``host_addr`` is this side's end of the link, ``addr`` the namespace's."""

    def __init__(self, subnet_octet: int | None = None) -> None:
        if shutil.which("ip") is None:
            raise NetnsError("the 'ip' command (Debian package iproute2) is missing")
        tag = secrets.token_hex(3)
        octet = subnet_octet if subnet_octet is not None else secrets.randbelow(200) + 20
        self.name = f"iris-{tag}"
        self.link = f"iv{tag}"
        base = f"10.{octet}.{int(tag[:2], 16)}"
        self.host_addr = f"{base}.1"
        self.addr = f"{base}.2"
        self._created = False

    def create(self) -> NetNamespace:
        _ip("netns", "add", self.name)
        self._created = True
        _ip("link", "add", self.link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        _ip("addr", "add", f"{self.host_addr}/30", "dev", self.link)
        _ip("link", "set", self.link, "up")
        _ip("-n", self.name, "addr", "add", f"{self.addr}/30", "dev", "eth0")
        _ip("-n", self.name, "link", "set", "eth0", "up")
        _ip("-n", self.name, "link", "set", "lo", "up")
        return self

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def close(self) -> None:
        if self._created:
            self._created = False
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)

    def __enter__(self) -> NetNamespace:
        try:
            return self.create()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

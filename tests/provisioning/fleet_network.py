"""A private network for several nspawn hosts: each boots in its own network namespace with one
address on a shared Linux bridge, as separate machines on a LAN would.

The bridge lives in a "switch" namespace of its own, so nothing is added to this machine's
network; the test process joins the LAN too (one veth end in its namespace, ``controller_addr``)
so it can talk to the hosts' services the way an operator's machine would. Nothing leaves this
machine. Needs root and iproute2. ``close()`` deletes every namespace it made, which removes
their links.
"""

from __future__ import annotations

import secrets
import subprocess
from types import TracebackType


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


class FleetNetwork:
    """``add(name)`` gives a host its namespace and address on 10.<n>.<m>.0/24."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(2)
        self.prefix = f"10.{secrets.randbelow(200) + 20}.{int(self.tag[:2], 16)}"
        self.switch = f"iris-lan-{self.tag}"
        self.controller_addr = f"{self.prefix}.254"
        self._namespaces: list[str] = []
        self._controller_link = f"ilc{self.tag}"
        self._next = 1

    def create(self) -> FleetNetwork:
        _ip("netns", "add", self.switch)
        self._namespaces.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        # The controller (this test process) on the LAN.
        _ip("link", "add", self._controller_link, "type", "veth", "peer", "name", "ctl",
            "netns", self.switch)  # fmt: skip
        _ip("-n", self.switch, "link", "set", "ctl", "master", "br0", "up")
        _ip("addr", "add", f"{self.controller_addr}/24", "dev", self._controller_link)
        _ip("link", "set", self._controller_link, "up")
        return self

    def add(self, name: str) -> tuple[str, str]:
        """A namespace for host ``name`` (booted later with ``--network-namespace-path``) and
        its address."""
        number = self._next
        self._next += 1
        netns = f"iris-{self.tag}-{number}"
        _ip("netns", "add", netns)
        self._namespaces.append(netns)
        port = f"p{number}"
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", netns)  # fmt: skip
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        addr = f"{self.prefix}.{number}"
        _ip("-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        return netns, addr

    def close(self) -> None:
        subprocess.run(
            ["ip", "link", "del", self._controller_link], capture_output=True, check=False
        )
        for netns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        self._namespaces.clear()

    def __enter__(self) -> FleetNetwork:
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

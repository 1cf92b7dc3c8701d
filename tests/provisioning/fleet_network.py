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

from iris_runtime.testing.netns import (
    add_namespace,
    add_veth,
    address_link,
    delete_namespace,
    ip,
    plug_in,
)
from iris_runtime.testing.scoped import Scoped


class FleetNetwork(Scoped):
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
        self._add_namespace(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        # The controller (this test process) on the LAN: its end here, the other on the bridge.
        add_veth(self._controller_link, self.switch, peer="ctl")
        self._attach("ctl")
        address_link(self._controller_link, f"{self.controller_addr}/24")
        return self

    def add(self, name: str) -> tuple[str, str]:
        """A namespace for host ``name`` (booted later with ``--network-namespace-path``) and
        its address."""
        number = self._next
        self._next += 1
        netns = f"iris-{self.tag}-{number}"
        self._add_namespace(netns)
        # The link is made in the switch: its end there joins the bridge, the other is the
        # host's eth0.
        port = f"p{number}"
        add_veth(port, netns, netns=self.switch)
        self._attach(port)
        addr = f"{self.prefix}.{number}"
        plug_in(netns, f"{addr}/24")
        return netns, addr

    def _add_namespace(self, netns: str) -> None:
        add_namespace(netns)
        self._namespaces.append(netns)

    def _attach(self, port: str) -> None:
        """The switch's end of a link becomes a port of its bridge."""
        ip("-n", self.switch, "link", "set", port, "master", "br0", "up")

    def close(self) -> None:
        subprocess.run(
            ["ip", "link", "del", self._controller_link], capture_output=True, check=False
        )
        for netns in reversed(self._namespaces):
            delete_namespace(netns)
        self._namespaces.clear()

    def _bring_up(self) -> None:
        self.create()

    def _take_down(self) -> None:
        self.close()

"""Network namespaces for tests: a second "host" on this machine (:class:`NetNamespace`), and the
``ip`` steps every namespace set-up is made of (a LAN of several, ``tests.provisioning.
fleet_network``, builds on them too).

Traffic between the two addresses crosses a real link and a real TCP/IP stack on each side, so
what the other end sees is another host's address, not loopback; nothing leaves the machine.
Needs root and iproute2 (``ip``). Names are random, so concurrent tests never collide, and
``close()`` deletes the namespace (which takes its end of the link, and so the link, with it).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess

from iris_runtime.testing.scoped import Scoped

# The name a namespace's end of its link has inside it, as a host's first interface would.
INSIDE_LINK = "eth0"


class NetnsError(RuntimeError):
    pass


def ip(*args: str) -> None:
    """``ip ARGS``; a :class:`NetnsError` quoting ``ip``'s own complaint when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _in(netns: str | None) -> tuple[str, ...]:
    """``ip``'s arguments that run it in ``netns`` (None: this process's namespace)."""
    return ("-n", netns) if netns else ()


def add_namespace(name: str) -> None:
    ip("netns", "add", name)


def delete_namespace(name: str) -> None:
    """Gone, with its end of every link (and so the links); no error if it is gone already."""
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def add_veth(end: str, into: str, *, peer: str = INSIDE_LINK, netns: str | None = None) -> None:
    """A link from ``end`` (here, or in ``netns``) to ``peer`` in namespace ``into``."""
    ip(*_in(netns), "link", "add", end, "type", "veth", "peer", "name", peer, "netns", into)


def address_link(link: str, cidr: str, *, netns: str | None = None) -> None:
    """``link`` (here, or in ``netns``) gets the address ``cidr`` and comes up."""
    ip(*_in(netns), "addr", "add", cidr, "dev", link)
    ip(*_in(netns), "link", "set", link, "up")


def plug_in(netns: str, cidr: str) -> None:
    """The namespace's end of its link gets ``cidr`` and comes up, and so does its loopback."""
    address_link(INSIDE_LINK, cidr, netns=netns)
    ip("-n", netns, "link", "set", "lo", "up")


class NetNamespace(Scoped):
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
        add_namespace(self.name)
        self._created = True
        add_veth(self.link, self.name)
        address_link(self.link, f"{self.host_addr}/30")
        plug_in(self.name, f"{self.addr}/30")
        return self

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def close(self) -> None:
        if self._created:
            self._created = False
            delete_namespace(self.name)

    def _bring_up(self) -> None:
        self.create()

    def _take_down(self) -> None:
        self.close()

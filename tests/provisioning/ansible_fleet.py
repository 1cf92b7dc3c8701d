"""Several booted nspawn hosts on a private network, and playbook runs against all of them.

Each host boots the shared rootfs on its own persistent overlay (so a reboot keeps its state)
inside its own network namespace of a :class:`FleetNetwork`: the hosts reach each other by
address over veth links and a bridge, as machines on a LAN do, and the test process is on that
LAN too. Ansible reaches every host through ``community.docker.nsenter``, as the single-host
tests do; the inventory is rewritten before each run (init pids change on reboot).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.provisioning.ansible_host import REPO, AnsibleRun, nsenter_connection, run_playbook
from tests.provisioning.fleet_network import FleetNetwork
from tests.provisioning.nspawn import NspawnHost


@dataclass
class FleetHost:
    name: str
    addr: str
    host: NspawnHost
    groups: tuple[str, ...]
    host_vars: dict[str, Any] = field(default_factory=dict)

    def run(self, *argv: str, timeout: float = 60.0) -> str:
        done = self.host.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"{self.name}: {argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def path(self, inside: str | Path) -> Path:
        return self.host.path(inside)


class Fleet:
    """Hosts added with :meth:`boot`; :meth:`playbook` runs against all of them."""

    def __init__(self, rootfs: Path, workdir: Path, network: FleetNetwork) -> None:
        self.rootfs = rootfs
        self.workdir = workdir
        self.network = network
        self.hosts: dict[str, FleetHost] = {}
        self.group_vars: dict[str, Any] = {}
        self._runs = 0
        for sub in ("inventory/group_vars", "tmp", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o700)  # group_vars hold test secrets

    def boot(self, name: str, groups: Sequence[str], **host_vars: Any) -> FleetHost:
        netns, addr = self.network.add(name)
        host = NspawnHost(
            self.rootfs,
            name=f"{name}-{self.network.tag}",
            log_file=self.workdir / f"{name}-console.log",
            overlay_dir=self.workdir / f"{name}-overlay",
            network_namespace=netns,
        ).start()
        member = FleetHost(name, addr, host, tuple(groups), dict(host_vars))
        self.hosts[name] = member
        return member

    def in_group(self, group: str) -> list[FleetHost]:
        return [h for h in self.hosts.values() if group in h.groups]

    def write_inventory(self) -> Path:
        inventory = self.workdir / "inventory"
        groups: dict[str, dict[str, Any]] = {}
        for member in self.hosts.values():
            for group in member.groups:
                groups.setdefault(group, {"hosts": {}})["hosts"][member.name] = None
        data = {
            "all": {
                "hosts": {
                    m.name: {**nsenter_connection(m.host), "ansible_host": m.addr, **m.host_vars}
                    for m in self.hosts.values()
                },
                "children": groups,
            }
        }
        (inventory / "hosts.yml").write_text(json.dumps(data, indent=2))
        (inventory / "group_vars" / "all.yml").write_text(json.dumps(self.group_vars, indent=2))
        return inventory

    def playbook(
        self,
        playbook: str,
        *,
        check: bool = False,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        label: str = "",
        timeout: float = 1700.0,
    ) -> AnsibleRun:
        inventory = self.write_inventory()
        self._runs += 1
        stem = f"{self._runs:02d}-{label or Path(playbook).stem}"
        argv = ["-i", str(inventory), *(["--check"] if check else []), *args]
        return run_playbook(
            REPO / playbook,
            argv,
            log=self.workdir / "logs" / f"{stem}.log",
            tmp=self.workdir / "tmp",
            env=env,
            timeout=timeout,
        )

    def stop(self) -> None:
        for member in self.hosts.values():
            member.host.stop()

"""Bridge ports for new sub-agents: the first free one in the configured range.

A port is free when no registered agent uses it (as its bridge port or its API port, bridge + 100)
and both it and its API port can be bound right now. The caller holds the registry lock while it
chooses and registers, so concurrent spawns never pick the same port.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from iris_runtime.agents.home import RECORDS_DIR
from iris_runtime.agents.spawn_config import API_PORT_OFFSET, PortRange
from iris_runtime.errors import IrisError


class PortsExhausted(IrisError):
    code = "ports_exhausted"
    status = 409


def ports_of(bridge_urls: Iterable[str]) -> set[int]:
    """Every port the agents at these URLs occupy: their bridge ports and their API ports."""
    taken: set[int] = set()
    for url in bridge_urls:
        port = urlsplit(url).port
        if port is not None:
            taken.update((port, port + API_PORT_OFFSET))
    return taken


def port_of(url: str) -> int:
    """The port of a bridge URL that spawn made (it always names one)."""
    port = urlsplit(url).port
    assert port is not None  # spawn chose it
    return port


def ports_of_homes(agents_dir: Path) -> set[int]:
    """Ports recorded by agent homes: an agent whose registration was removed by hand still
    holds its port while its unit or process runs."""
    taken: set[int] = set()
    for record_file in (agents_dir / RECORDS_DIR).glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(record_file.read_text(encoding="utf-8"))
            taken.update((int(data["bridge_port"]), int(data["api_port"])))
    return taken


def can_bind(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR as gunicorn sets it: connections in TIME_WAIT (any port an agent served
        # in the last minute) do not stop a new listener, while a live listener still does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def allocate_bridge_port(ports: PortRange, taken: set[int]) -> int:
    """The first port in ``ports`` whose bridge and API ports are both free."""
    for port in ports:
        api_port = port + API_PORT_OFFSET
        if port in taken or api_port in taken:
            continue
        if can_bind(port) and can_bind(api_port):
            return port
    raise PortsExhausted(
        f"no free bridge port in {ports} (each agent needs its port and that port + "
        f"{API_PORT_OFFSET} free); remove an agent or widen IRIS_AGENT_PORTS"
    )

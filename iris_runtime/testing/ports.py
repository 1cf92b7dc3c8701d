"""Loopback ports for tests and benches: whether one is free to bind."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def bindable(port: int, host: str = LOOPBACK) -> bool:
    """Whether ``port`` can be bound on ``host`` now (``SO_REUSEADDR``, so a port whose last
    connection lingers in TIME_WAIT counts as free: it is what a restarted server can bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True

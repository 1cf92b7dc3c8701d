"""Which Vault/OpenBao node a request goes to, and moving on when it stops.

``IRIS_VAULT_ADDR`` may list every node of an HA cluster (OpenBao's integrated raft storage).
Any node answers: a standby forwards requests to the active node over the cluster port, so
Iris needs no leader discovery of its own. What it needs is to stop asking a node that is gone:

- A request that fails in a way another node could avoid (connection refused or reset, a
  timeout, HTTP 500/501/502/503 such as "sealed", "not initialised" (a node that lost its raft
  data and has not joined again) or "no active node") is tried on the next node, each node at
  most once per request. A 4xx is an answer about the request, not the node, and is never
  retried elsewhere.
- A request that may have been carried out already is not sent again: after a read timeout
  (sent, no answer), only a request marked ``idempotent`` (a read) moves on; a write or a login
  fails with the timeout instead of maybe happening twice.
- Each node has its own hvac client (its own URL: no thread ever re-points a client another
  thread is using); they share one requests session (the connection pool) and one token.
- The node that answered stays current for every thread, so after a failover one request pays
  the detour, not all of them.
- Threads that failed on the same node move the pointer once: a thread moves it only if it
  still points where that thread failed.

Tokens are cluster-wide, so a failover keeps the login.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import hvac.exceptions as hvac_errors
import requests

if TYPE_CHECKING:
    import hvac

log = logging.getLogger(__name__)

T = TypeVar("T")

# Failures that say "this node", not "this request".
NODE_FAILURES: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    hvac_errors.VaultDown,  # 503: sealed, standby without an active node, shutting down
    hvac_errors.InternalServerError,  # 500: "local node not active but active node not found"
    hvac_errors.BadGateway,  # 502: request forwarding to the active node failed
    hvac_errors.VaultNotInitialized,  # 501: a node that lost its data and has not rejoined
)


class VaultNodes:
    """The configured nodes, one hvac client each, and the one in use."""

    def __init__(self, clients: Sequence[hvac.Client]) -> None:
        if not clients:
            raise ValueError("at least one Vault address is needed")
        self.clients = tuple(clients)
        self.addrs = tuple(str(client.url) for client in self.clients)
        self._current = 0
        self._lock = threading.Lock()
        self.failovers = 0  # diagnostics and tests

    @property
    def current(self) -> str:
        return self.addrs[self._current]

    @property
    def token(self) -> str:
        return str(self.clients[0].token or "")

    def set_token(self, token: str) -> None:
        """The token every node's client presents (tokens are cluster-wide)."""
        for client in self.clients:
            client.token = token

    def describe(self) -> str:
        """For messages: the address, or every address when there are several."""
        if len(self.addrs) == 1:
            return self.addrs[0]
        return f"{self.current} (of {', '.join(self.addrs)})"

    def run(self, op: Callable[[hvac.Client], T], *, idempotent: bool = False) -> T:
        """``op(client)`` on the current node, then on each other node while the failure is the
        node's; the last failure is raised when every node failed. A read timeout moves on only
        for an ``idempotent`` op: anything else may have been done already."""
        for attempt in range(len(self.addrs)):
            index = self._current
            try:
                return op(self.clients[index])
            except NODE_FAILURES as exc:
                if attempt == len(self.addrs) - 1:
                    raise
                if isinstance(exc, requests.exceptions.ReadTimeout) and not idempotent:
                    raise
                self._move_on(index, exc)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _move_on(self, failed: int, exc: Exception) -> None:
        with self._lock:
            if self._current != failed:
                return  # another thread moved on already
            self._current = (failed + 1) % len(self.addrs)
            self.failovers += 1
            # The class name only: requests' messages embed URLs, hvac's quote bodies.
            log.warning(
                "vault: %s failed (%s); using %s",
                self.addrs[failed],
                type(exc).__name__,
                self.addrs[self._current],
            )

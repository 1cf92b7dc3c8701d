"""Short-lived tokens for sandboxed commands: each can read only the secrets the agent's skills
declare, and is revoked when its run ends.

A command in a sandbox must not get Iris's own ``IRIS_API_TOKEN`` (for Iris, the unrestricted
caller). The bash tool issues a token here for each sandboxed run; the API's token check
identifies it as the caller ``sandbox-run:<id>`` (a name no agent can have: agent names hold no
colon), and the secret broker lets that caller read exactly the names on the grant. The tokens
live in this process only, like the runs they belong to: a restart revokes them all.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

RUN_CALLER_PREFIX = "sandbox-run:"


@dataclass(frozen=True)
class RunGrant:
    caller: str
    token: str
    allowed: frozenset[str]
    expires: float  # time.monotonic()


class RunTokens:
    def __init__(self) -> None:
        self._grants: dict[str, RunGrant] = {}  # by caller
        self._lock = threading.Lock()

    def issue(self, allowed: Iterable[str], ttl_seconds: float) -> RunGrant:
        grant = RunGrant(
            caller=RUN_CALLER_PREFIX + secrets.token_hex(8),
            token=secrets.token_urlsafe(32),
            allowed=frozenset(allowed),
            expires=time.monotonic() + ttl_seconds,
        )
        with self._lock:
            self._grants[grant.caller] = grant
        return grant

    def revoke(self, grant: RunGrant) -> None:
        with self._lock:
            self._grants.pop(grant.caller, None)

    def identify(self, presented: str) -> str | None:
        """The caller a presented token stands for, while its grant lasts."""
        now = time.monotonic()
        with self._lock:
            grants = list(self._grants.values())
        for grant in grants:  # constant-time per comparison; few runs are live at once
            if hmac.compare_digest(presented.encode(), grant.token.encode()):
                return grant.caller if grant.expires > now else None
        return None

    def may_read(self, caller: str, name: str) -> bool:
        with self._lock:
            grant = self._grants.get(caller)
        return grant is not None and grant.expires > time.monotonic() and name in grant.allowed


# One per process: the bash tool issues, the API's token check and the broker consult it.
RUN_TOKENS = RunTokens()

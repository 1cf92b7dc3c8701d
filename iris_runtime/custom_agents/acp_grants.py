"""The tokens that scope an ACP agent's tools to it and its chat, and the MCP server entry that
carries one.

Each ACP session Iris opens carries one stdio MCP server entry whose command is Iris's own CLI
(``iris mcp-tools``, see :mod:`iris_runtime.cli.mcp_tools_cmd`). The entry's ``env`` holds a
random token minted for that one agent process; the MCP server sends it with every tool call
over the reach socket (``{"op": "tool", "token": …}``), and Iris looks up what the token grants:
the agent's kind and its chat (:mod:`.acp_tools`). The token dies with the process, and Iris's
API token is never handed out.
"""

from __future__ import annotations

import secrets
import sys
import threading
from dataclasses import dataclass
from typing import Any

TOKEN_VARIABLE = "IRIS_TOOLS_TOKEN"  # noqa: S105 (a variable name, not a secret)
SOCKET_VARIABLE = "IRIS_REACH_SOCKET"
SERVER_NAME = "iris"


@dataclass(frozen=True)
class Grant:
    kind: str
    chat_id: str


class ToolGrants:
    """The live tokens: one per ACP agent process, revoked when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._grants: dict[str, Grant] = {}

    def mint(self, kind: str, chat_id: str) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._grants[token] = Grant(kind, chat_id)
        return token

    def revoke(self, token: str) -> None:
        with self._lock:
            self._grants.pop(token, None)

    def get(self, token: Any) -> Grant | None:
        if not isinstance(token, str) or not token:
            return None
        with self._lock:
            found = next(
                (g for t, g in self._grants.items() if secrets.compare_digest(t, token)), None
            )
        return found


def server_entry(token: str, kind: str, chat_id: str, socket_path: str) -> dict[str, Any]:
    """The ``mcpServers`` entry (stdio) for ``session/new`` and ``session/load``: the token
    travels in ``env``, never in the command line."""
    env = {TOKEN_VARIABLE: token, SOCKET_VARIABLE: socket_path, "IRIS_TOOLS_AGENT": kind}
    env["IRONWIRE_CHAT_ID"] = chat_id  # informational: the token alone decides the chat
    return {
        "name": SERVER_NAME,
        "command": sys.executable,
        "args": ["-m", "iris_runtime", "mcp-tools"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }

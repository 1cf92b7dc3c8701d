"""``iris acp`` driven by the official SDK's client side, as an editor drives it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    RequestPermissionResponse,
)

from iris_runtime.testing.server import clean_environment


class Editor:
    """What an editor's client records: every session update, by session."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.permissions: list[Any] = []
        self.answer = "allow"  # the option id the user picks when asked

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(tool_call)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=self.answer, outcome="selected")
        )

    def of(self, session_id: str, kind: str | None = None) -> list[Any]:
        return [
            u
            for s, u in self.updates
            if s == session_id and (kind is None or u.session_update == kind)
        ]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.of(session_id, kind))


@asynccontextmanager
async def iris_acp(
    data_dir: Path, *flags: str, **env: str
) -> AsyncIterator[tuple[ClientSideConnection, Editor, InitializeResponse]]:
    editor = Editor()
    environment = clean_environment(IRIS_DATA_DIR=str(data_dir), **env)
    async with spawn_agent_process(
        editor,  # type: ignore[arg-type]
        sys.executable,
        "-m",
        "iris_runtime",
        "acp",
        *flags,
        env=environment,
        transport_kwargs={"limit": 50 * 1024 * 1024, "shutdown_timeout": 20.0},
    ) as (conn, _process):
        init = await asyncio.wait_for(
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="test-editor", version="1"),
            ),
            60,
        )
        yield conn, editor, init


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())

"""The requests that open an ACP agent's session for a chat, each one a clear failure when the
agent hangs, answers with an error or dies (spec 004, "The conversation", "Models").

- The chat keeps the agent's session id: ``session/load`` when the agent advertises it, else
  (or when loading fails) ``session/new``, and the owner is told once per chat that the agent
  is continuing fresh.
- Iris's MCP server rides along; an agent that refuses it gets one retry without, and none from
  then on until its restart.
- The chat's model is set with ``session/set_config_option`` where the agent offers one.

Everything here runs on the ACP loop thread (:class:`~.acp_loop.LoopThread`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from acp import RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import AgentCapabilities, McpServerStdio, SessionConfigOptionSelect

from iris_runtime.custom_agents.acp_client import HostClient
from iris_runtime.custom_agents.acp_grants import ToolGrants
from iris_runtime.custom_agents.acp_process import AgentProcess
from iris_runtime.custom_agents.chats import ChatBook
from iris_runtime.custom_agents.manifest import Manifest

log = logging.getLogger("iris_runtime.custom_agents.acp")
T = TypeVar("T")

FRESH_NOTICE = "This agent could not restore its memory of this chat, so it is continuing fresh."
METHOD_NOT_FOUND = -32601


class AcpFailure(Exception):
    """The turn fails; the message says why, for the chat. ``detail``: an error answer's data."""

    detail: Any = None
    answered: bool = False  # the agent answered with an error (not a hang, not a death)


@dataclass
class Live:
    """The one agent process alive, and what it was started for."""

    key: tuple[Any, ...]  # kind, chat, model, bin, args: a different key is a different process
    process: AgentProcess
    conn: ClientSideConnection
    client: HostClient
    caps: AgentCapabilities
    session_id: str = ""
    token: str = ""  # its MCP tools' grant (acp_grants), revoked when the process ends
    mcp: list[McpServerStdio] | None = None  # None once the agent refused MCP servers


class SessionOpener:
    """Opens (or restores) the session of a started agent process for a chat."""

    def __init__(
        self, chats: ChatBook, cwd: Path, grants: ToolGrants, start_seconds: float
    ) -> None:
        self.chats = chats
        self.cwd = cwd
        self.grants = grants
        self.start_seconds = start_seconds
        self._no_mcp: set[str] = set()  # kinds that refused MCP servers, until their restart

    def takes_mcp(self, kind: str) -> bool:
        return kind not in self._no_mcp

    def forget_refusal(self, kind: str) -> None:
        """An agent restart: its next process is offered Iris's MCP server again."""
        self._no_mcp.discard(kind)

    async def open(
        self, manifest: Manifest, live: Live, chat_id: str, model: str | None
    ) -> str | None:
        """The chat's session on ``live``; returns the notice for the owner, if any."""
        kind, cwd = manifest.kind, str(self.cwd)
        stored = self.chats.agent_state(chat_id, kind).get("session")
        options: list[Any] | None = None
        if isinstance(stored, str) and stored and live.caps.load_session:
            try:
                servers: list[Any] = list(live.mcp or [])  # refused: session/new follows
                loaded = await self.step(
                    live,
                    "session/load",
                    live.conn.load_session(cwd=cwd, session_id=stored, mcp_servers=servers),
                )
            except AcpFailure as exc:
                if not live.process.alive:
                    raise
                log.info("acp agent %s could not load session %s: %s", kind, stored, exc)
            else:
                live.session_id = stored
                options = loaded.config_options if loaded is not None else None
        notice = None
        if not live.session_id:
            created = await self._with_mcp(
                live, "session/new", lambda mcp: live.conn.new_session(cwd=cwd, mcp_servers=mcp)
            )
            live.session_id = created.session_id
            options = created.config_options
            if stored and not self.chats.agent_state(chat_id, kind).get("told_fresh"):
                notice = FRESH_NOTICE
                self.chats.update_agent(chat_id, kind, told_fresh=True)
        self.chats.update_agent(chat_id, kind, session=live.session_id)
        if model is not None:
            await self._choose_model(live, options or [], model)
        return notice

    async def _with_mcp(
        self, live: Live, what: str, call: Callable[[list[Any]], Awaitable[T]]
    ) -> T:
        """``what`` with Iris's MCP server; refused (an error answer: a hang or a death is no
        refusal), one retry with none (and none from then on, until the agent's restart), its
        tools token revoked, and the log names the agent and its reason (never the token)."""
        try:
            return await self.step(live, what, call(list(live.mcp or [])))
        except AcpFailure as exc:
            if not live.mcp or not exc.answered or not live.process.alive:
                raise
            why = f"{exc} {exc.detail}" if exc.detail is not None else str(exc)
            if live.token:  # an error that echoes its input would show the server's env
                why = why.replace(live.token, "[the tools token]")
            msg = "acp agent %s refused %s with MCP servers (%s); retrying without"
            log.warning(msg, live.key[0], what, why)
            live.mcp = None
            self.grants.revoke(live.token)
            live.token = ""
            self._no_mcp.add(live.key[0])
        return await self.step(live, what, call([]))

    async def _choose_model(self, live: Live, options: list[Any], model: str) -> None:
        """``session/set_config_option`` for an agent that offers a model option; one that
        rejects it keeps working (the variable, if any, already carried the choice)."""
        selects = (o for o in options if isinstance(o, SessionConfigOptionSelect))
        option = next((o for o in selects if o.category == "model"), None)
        if option is None:
            return
        try:
            await self.step(
                live,
                "session/set_config_option",
                live.conn.set_config_option(
                    config_id=option.id, session_id=live.session_id, value=model
                ),
            )
        except AcpFailure as exc:
            if not live.process.alive:
                raise
            log.info("acp agent %s did not take model %s: %s", live.key[0], model, exc)

    async def step(self, live: Live, what: str, call: Awaitable[T]) -> T:
        """One request of the start: a hang, an error answer or a death is a clear failure."""
        timeout = self.start_seconds
        try:
            return await asyncio.wait_for(call, timeout)
        except TimeoutError:
            raise AcpFailure(f"it did not answer {what} within {timeout:g} s") from None
        except RequestError as exc:
            failure = AcpFailure(f"it answered {what} with an error: {said(exc)}")
            failure.detail, failure.answered = exc.data, True
            raise failure from None
        except (ConnectionError, OSError, EOFError):
            code = await live.process.reap(2.0)
            raise AcpFailure(f"{what}: {live.process.death(code)}") from None


def said(exc: RequestError) -> str:
    """What an error answer said, for the chat."""
    message = str(exc) or "an error"
    if getattr(exc, "code", None) == METHOD_NOT_FOUND:
        return f"{message} (method not found)"
    return message

"""An ACP agent for tests, written with the official SDK's agent side.

Run it as ``python -m iris_runtime.testing.acp_agent RECORD [flags]``. Every request it receives
is appended to RECORD as one JSON line (with its pid), so a test can assert what crossed the
wire. Flags: ``--load`` advertises ``loadSession`` (sessions it made are kept in RECORD's folder,
so a restarted process can load them); ``--images`` advertises image prompts; ``--model-option``
offers a model config option; ``--no-config`` answers set_config_option "method not found";
``--hang-session`` never answers ``session/new``; ``--bad-version`` answers protocol version 9;
``--refuse-mcp`` refuses any session that carries MCP servers. The MCP servers a session carried
are recorded (name, command, args and env names; env values only under ``mcp_env``).

What it does with a prompt is chosen by the text's first word:

- ``echo TEXT``: ``You said: TEXT`` (one chunk);
- ``tools``: a read tool call (raw input), a permission request, the call's result, a chunk;
- ``think``: a thought chunk, a plan, a chunk;
- ``env``: its pid and the model variable (``TEST_AGENT_MODEL``);
- ``images``: how many image blocks came, in order of the blocks' types;
- ``recall``: every earlier prompt text of this session;
- ``garbage``: a line that is not JSON-RPC, then a chunk;
- ``die``: a stderr line, then exits with code 3 mid-prompt;
- ``wait``: waits for ``session/cancel``, then answers ``cancelled``;
- ``hang``: ignores cancel and never answers;
- ``refuse``: stop reason ``refusal``;
- ``mcp TOOL JSON``: connects to the session's first MCP server with the official ``mcp`` client
  and calls TOOL with JSON arguments (``mcp tools`` lists the tools); says ``ok: …`` or
  ``error: …``.

:func:`install` puts it in an Iris's ``agents.d`` as a custom agent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any, cast

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.interfaces import Agent, Client
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
    ToolCallUpdate,
)


class TestAgent:
    def __init__(self, record: Path, flags: set[str]) -> None:
        self.record = record
        self.flags = flags
        self.conn: Client | None = None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.store = record.with_suffix(".sessions.json")
        self.mcp: dict[str, list[Any]] = {}  # session id -> the MCP servers it carried

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    def note(self, method: str, **fields: Any) -> None:
        line = {"method": method, "pid": os.getpid(), **fields}
        with self.record.open("a") as out:
            out.write(json.dumps(line, default=str) + "\n")

    def _sessions(self) -> dict[str, list[str]]:
        try:
            return dict(json.loads(self.store.read_text()))
        except (OSError, ValueError):
            return {}

    def _save(self, sessions: dict[str, list[str]]) -> None:
        self.store.write_text(json.dumps(sessions))

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        caps = kwargs.get("client_capabilities")
        shown = caps and caps.model_dump(by_alias=True, exclude_none=True)
        self.note("initialize", protocol_version=protocol_version, caps=shown)
        return InitializeResponse(
            protocol_version=9 if "--bad-version" in self.flags else PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session="--load" in self.flags,
                prompt_capabilities=PromptCapabilities(image="--images" in self.flags),
            ),
        )

    def _options(self) -> list[Any] | None:
        if "--model-option" not in self.flags:
            return None
        choices = [SessionConfigSelectOption(value=v, name=v) for v in ("fast", "deep")]
        option = SessionConfigOptionSelect(
            id="model",
            name="Model",
            category="model",
            type="select",
            current_value="fast",
            options=choices,
        )
        return [option]

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        servers = list(kwargs.get("mcp_servers") or [])
        self.note("session/new", cwd=cwd, mcp=len(servers), **_shown_servers(servers))
        if "--hang-session" in self.flags:
            await asyncio.Event().wait()
        if servers and "--refuse-mcp-echo" in self.flags:  # like a pydantic error's ``input``
            shown = [s.model_dump(mode="json") for s in servers]
            raise RequestError.invalid_params({"mcpServers": "unsupported", "input": shown})
        if servers and "--refuse-mcp" in self.flags:
            raise RequestError.invalid_params({"mcpServers": "this agent takes no MCP servers"})
        session_id = uuid.uuid4().hex
        self.mcp[session_id] = servers
        sessions = self._sessions()
        sessions[session_id] = []
        self._save(sessions)
        return NewSessionResponse(session_id=session_id, config_options=self._options())

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        servers = list(kwargs.get("mcp_servers") or [])
        self.note("session/load", session_id=session_id, mcp=len(servers))
        if servers and "--refuse-mcp" in self.flags:
            raise RequestError.invalid_params({"mcpServers": "this agent takes no MCP servers"})
        if session_id not in self._sessions():
            raise RequestError.invalid_params({"session": "unknown"})
        self.mcp[session_id] = servers
        return LoadSessionResponse(config_options=self._options())

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        self.note("session/set_config_option", config_id=config_id, value=value)
        if "--no-config" in self.flags:
            raise RequestError.method_not_found("session/set_config_option")
        return SetSessionConfigOptionResponse(config_options=self._options() or [])

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.note("session/cancel", session_id=session_id)
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        types = [block.type for block in prompt]
        text = "".join(block.text for block in prompt if block.type == "text")
        self.note("session/prompt", session_id=session_id, types=types, text=text)
        sessions = self._sessions()
        earlier = sessions.get(session_id, [])
        sessions[session_id] = [*earlier, text]
        self._save(sessions)
        word, _, rest = text.partition(" ")
        word = word.split()[0] if word.split() else word
        cancelled = self.cancelled.setdefault(session_id, asyncio.Event())
        cancelled.clear()
        say = self._say(session_id)
        if word == "echo":
            await say(f"You said: {rest}")
        elif word == "tools":
            await self._tools(session_id)
        elif word == "think":
            assert self.conn is not None
            await self.conn.session_update(session_id, update_agent_thought_text("pondering"))
            plan = update_plan([plan_entry("look", status="completed"), plan_entry("answer")])
            await self.conn.session_update(session_id, plan)
            await say("thought about it")
        elif word == "env":
            await say(f"pid={os.getpid()} model={os.environ.get('TEST_AGENT_MODEL', '')}")
        elif word == "images":
            await say(f"blocks: {' '.join(types)}")
        elif word == "recall":
            await say("I remember: " + " / ".join(earlier))
        elif word == "garbage":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            await say("after garbage")
        elif word == "die":
            sys.stderr.write("fatal: the model went away\n")
            sys.stderr.flush()
            os._exit(3)
        elif word == "wait":
            await say("waiting")
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        elif word == "hang":
            await say("hanging")
            await asyncio.Event().wait()
        elif word == "refuse":
            return PromptResponse(stop_reason="refusal")
        elif word == "mcp":
            await say(await _use_mcp(self.mcp.get(session_id) or [], rest))
        else:
            await say(f"unknown: {text}")
        return PromptResponse(stop_reason="end_turn")

    def _say(self, session_id: str) -> Any:
        async def say(text: str) -> None:
            assert self.conn is not None
            await self.conn.session_update(session_id, update_agent_message_text(text))

        return say

    async def _tools(self, session_id: str) -> None:
        assert self.conn is not None
        start = start_tool_call(
            "call-1",
            "Read report.pdf",
            kind="read",
            status="pending",
            raw_input={"file_path": "/srv/report.pdf"},
        )
        await self.conn.session_update(session_id, start)
        options = [
            PermissionOption(option_id="once", name="Allow once", kind="allow_once"),
            PermissionOption(option_id="always", name="Always", kind="allow_always"),
            PermissionOption(option_id="no", name="Reject", kind="reject_once"),
        ]
        answer = await self.conn.request_permission(
            options=options,
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id="call-1", title="Read report.pdf"),
        )
        self.note("permission", outcome=answer.outcome.model_dump(by_alias=True, exclude_none=True))
        done = update_tool_call(
            "call-1", status="completed", content=[tool_content(text_block("42 pages"))]
        )
        await self.conn.session_update(session_id, done)
        await self.conn.session_update(session_id, update_agent_message_text("read it"))


def _shown_servers(servers: list[Any]) -> dict[str, Any]:
    if not servers:
        return {}
    shown = [
        {
            "name": s.name,
            "command": s.command,
            "args": list(s.args),
            "env": [e.name for e in s.env],
        }
        for s in servers
    ]
    values = {e.name: e.value for s in servers for e in s.env}
    return {"servers": shown, "mcp_env": values}


async def _use_mcp(servers: list[Any], rest: str) -> str:
    """One MCP tool call (or ``tools``: the list) on the first server, with the official client."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    if not servers:
        return "error: no MCP server was offered"
    server = servers[0]
    tool, _, raw = rest.strip().partition(" ")
    env = {**os.environ, **{e.name: e.value for e in server.env}}
    params = StdioServerParameters(command=server.command, args=list(server.args), env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        if tool == "tools":
            listed = await session.list_tools()
            return "ok: " + " ".join(sorted(t.name for t in listed.tools))
        result: Any = await session.call_tool(tool, json.loads(raw or "{}"))
    text = " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))
    return f"{'error' if getattr(result, 'is_error', False) else 'ok'}: {text}"


# Named in full: run with ``python -m``, this module's ``__name__`` is ``__main__``.
MODULE = "iris_runtime.testing.acp_agent"


def manifest(record: Path, kind: str = "coder", *flags: str, **extra: Any) -> dict[str, Any]:
    """The custom-agent manifest that runs this agent as ``kind`` with ``flags``, recording to
    ``record``; ``extra`` adds manifest keys (``models``, ``modelEnv``, ...)."""
    args = ["-m", MODULE, str(record), *flags]
    return {"kind": kind, "label": kind.title(), "bin": sys.executable, "args": args, **extra}


def install(agents_d: Path, record: Path, kind: str = "coder", *flags: str, **extra: Any) -> Path:
    """Write :func:`manifest` as ``agents_d/<kind>.json`` (an Iris's ``agents.d``, made if
    missing) so the Iris hosts this agent; returns the manifest's path."""
    agents_d.mkdir(parents=True, exist_ok=True)
    path = agents_d / f"{kind}.json"
    path.write_text(json.dumps(manifest(record, kind, *flags, **extra)))
    return path


def main() -> None:
    record = Path(sys.argv[1])
    asyncio.run(run_agent(cast("Agent", TestAgent(record, set(sys.argv[2:])))))


if __name__ == "__main__":
    main()

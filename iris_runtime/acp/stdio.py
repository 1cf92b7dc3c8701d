"""``iris acp``: Iris on stdio for an editor.

Stdout carries nothing but protocol lines: the protocol gets its own copy of file descriptor 1,
and fd 1 itself then points at stderr, so a stray print from any library lands in the log, not
in the editor's JSON-RPC stream. A line from the editor that is not JSON is answered with a
JSON-RPC parse error (and logged) instead of being skipped in silence.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import BinaryIO, cast

from acp import run_agent
from acp.interfaces import Agent

from iris_runtime.acp.agent import IrisAgent
from iris_runtime.acp.lines import read_lines
from iris_runtime.acp.models import ModelOption
from iris_runtime.acp.permissions import Asker, gate_tools
from iris_runtime.acp.transport import AcpTransport
from iris_runtime.config import Settings

log = logging.getLogger(__name__)

LINE_LIMIT = 50 * 1024 * 1024  # as the SDK's: images arrive base64 in one line
PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


def protocol_stdout() -> BinaryIO:
    """The protocol's own stdout; from here on fd 1 (and ``sys.stdout``) are stderr."""
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def serve_stdio(settings: Settings, *, ask_permission: bool = False) -> None:
    from iris_runtime.runtime import Runtime

    out = protocol_stdout()
    runtime = Runtime.build(settings)
    transport = AcpTransport(runtime.engine)
    runtime.engine.add_transport(transport, internal=True)
    asker = Asker()
    if ask_permission:
        gated = gate_tools(runtime.engine.tools, asker)
        log.info("the editor is asked before every call of: %s", ", ".join(gated) or "nothing")
    runtime.start()
    agent = IrisAgent(runtime.engine, transport, ModelOption(settings), asker)
    try:
        asyncio.run(_serve(agent, out))
    finally:
        runtime.stop()


async def _serve(agent: IrisAgent, out: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    agent.asker.loop = loop
    stdin = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    checked = asyncio.StreamReader(limit=LINE_LIMIT)
    pump = loop.create_task(_check_lines(stdin, checked, writer))
    try:
        await run_agent(cast(Agent, agent), input_stream=writer, output_stream=checked)
    finally:
        pump.cancel()
        agent.stop_all()
    log.info("the editor closed the connection")


async def _check_lines(
    source: asyncio.StreamReader, sink: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Pass JSON objects on to the SDK; answer anything else with a parse error."""
    try:
        async for line in read_lines(source):
            stripped = line if line is not None else b"(a line longer than the limit)"
            try:
                message = json.loads(stripped)
            except (ValueError, RecursionError):
                message = None
            if isinstance(message, dict):
                sink.feed_data(stripped + b"\n")
                continue
            log.warning("the editor sent a line that is not JSON-RPC: %r", stripped[:120])
            writer.write(json.dumps(PARSE_ERROR).encode() + b"\n")
            await writer.drain()
    finally:
        sink.feed_eof()

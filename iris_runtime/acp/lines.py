"""The line filter of both ends of ACP over stdio (``iris acp`` reading its editor, Iris reading
a hosted agent): newline-delimited JSON-RPC, one message a line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


async def read_lines(source: asyncio.StreamReader) -> AsyncIterator[bytes | None]:
    """Each non-blank line of ``source``, stripped; ``None`` once for a line longer than the
    reader's limit, whose rest is dropped up to its newline (never read as a line of its own)."""
    overlong = False  # inside a line past the limit
    while True:
        try:
            line = await source.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            line = exc.partial
        except asyncio.LimitOverrunError as exc:
            if not overlong:
                yield None
            overlong = True
            await source.readexactly(exc.consumed)
            continue
        if not line:
            return
        if overlong:
            overlong = False
            continue
        stripped = line.strip()
        if stripped:
            yield stripped

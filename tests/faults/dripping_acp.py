"""The shipped ACP fake (:mod:`iris_runtime.testing.acp_agent`, built with the official SDK) taught
one more word for crash trials: ``drip N MS HOLD_MS`` streams N chunks ``MS`` milliseconds apart,
then holds the prompt open ``HOLD_MS`` more before ending the turn. A turn that lasts a known while
gives a kill a span to land in; every other word is the fake's own.

Iris runs it from the manifest :func:`manifest` makes: as a script, because Iris starts an ACP
agent in its workspace, where ``tests`` is no package.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, cast

from acp import run_agent
from acp.interfaces import Agent
from acp.schema import PromptResponse

from iris_runtime.testing.acp_agent import TestAgent


class DrippingAgent(TestAgent):
    """The SDK-built test agent, plus ``drip``."""

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = "".join(block.text for block in prompt if block.type == "text")
        word, _, rest = text.partition(" ")
        if word != "drip":
            return await super().prompt(session_id, prompt, **kwargs)
        self.note("session/prompt", session_id=session_id, types=["text"], text=text)
        count, pause_ms, hold_ms = (int(n) for n in rest.split()[:3])
        say = self._say(session_id)
        for n in range(count):
            await asyncio.sleep(pause_ms / 1000)
            await say(f"{n} ")
        await asyncio.sleep(hold_ms / 1000)
        return PromptResponse(stop_reason="end_turn")


def manifest(kind: str, record: Path) -> dict[str, Any]:
    """An agents.d manifest that runs this agent, recording to ``record``."""
    return {
        "kind": kind,
        "bin": sys.executable,
        "args": [str(Path(__file__).resolve()), str(record)],
    }


if __name__ == "__main__":
    agent = DrippingAgent(Path(sys.argv[1]), set(sys.argv[2:]))
    asyncio.run(run_agent(cast("Agent", agent)))

"""ACP agents for served Iris in tests: a manifest that runs the SDK-built test agent
(:mod:`iris_runtime.testing.acp_agent`) as a real subprocess, and reading what it recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from iris_runtime.testing import acp_agent as sdk_agent
from tests.custom_agents.conftest import Setup


def acp_agent(setup: Setup, kind: str = "coder", *flags: str, **extra: Any) -> Path:
    """Put an ACP manifest for the test agent in agents.d; returns its record file."""
    record = setup.tmp_path / f"{kind}-acp.jsonl"
    sdk_agent.install(setup.agents_d, record, kind, *flags, **extra)
    return record


def recorded(record: Path, method: str | None = None) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    lines = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    return [line for line in lines if method is None or line["method"] == method]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of Iris may linger as a zombie until reaped: that is not alive.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pid_of(reply_text: str) -> int:
    """The pid an ``env`` reply names (after the fresh-memory notice, if there is one)."""
    word = next(w for w in reply_text.split() if w.startswith("pid="))
    return int(word.removeprefix("pid="))

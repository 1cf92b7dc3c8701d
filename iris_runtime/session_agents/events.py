"""How a sub-agent looks to people watching its origin chat: one shape for the session stream
(SSE), the Web UI's live cards, ``GET /sessions/<id>/subagents`` and ``sessions_list``.

A sub-agent is its spawn (its identity: run id, number, label, when it was created, whether it is
archived) seen through its latest run (a follow-up message's, or the spawn's own): status and
times come from that run.
"""

from __future__ import annotations

import time
from typing import Any

from iris_runtime.session_agents.store import RunRecord

# What a run's store state shows as before it has an outcome.
_SHOWN_STATE = {"queued": "queued", "running": "running", "announcing": "running"}


def status_of(record: RunRecord) -> str:
    if record.state == "ended":
        return record.outcome or "unknown"
    return _SHOWN_STATE.get(record.state, "unknown")


def runtime_seconds(record: RunRecord) -> float | None:
    if record.started is None:
        return None
    return round((record.ended or time.time()) - record.started, 3)


def describe(spawn: RunRecord, run: RunRecord | None = None) -> dict[str, Any]:
    """A sub-agent as JSON: ``spawn``'s identity, ``run``'s (default: the spawn's) progress."""
    run = run or spawn
    return {
        "runId": spawn.run_id,
        "index": spawn.seq,
        "sessionKey": spawn.session_key,
        "sessionId": spawn.child_channel,
        "label": spawn.label,
        "agentId": spawn.agent_id,
        "model": spawn.model,
        "status": status_of(run),
        "cleanup": spawn.cleanup,
        "createdAt": spawn.created,
        "startedAt": run.started,
        "endedAt": run.ended,
        "runtimeSeconds": runtime_seconds(run),
        "archived": spawn.archived is not None,
    }


def subagent_event(spawn: RunRecord, run: RunRecord | None, phase: str) -> dict[str, Any]:
    return {"type": "subagent", "phase": phase, **describe(spawn, run)}

"""How a sub-agent looks to people watching its origin chat: one event shape for the session
stream (SSE), the Web UI's live cards and ``GET /sessions/<id>/subagents``."""

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


def describe(record: RunRecord) -> dict[str, Any]:
    """A run as JSON (the API's and the events' shared fields)."""
    return {
        "runId": record.run_id,
        "index": record.seq,
        "sessionKey": record.session_key,
        "sessionId": record.child_channel,
        "label": record.label,
        "agentId": record.agent_id,
        "model": record.model,
        "status": status_of(record),
        "cleanup": record.cleanup,
        "createdAt": record.created,
        "startedAt": record.started,
        "endedAt": record.ended,
        "runtimeSeconds": runtime_seconds(record),
        "archived": record.archived is not None,
    }


def subagent_event(record: RunRecord, phase: str) -> dict[str, Any]:
    return {"type": "subagent", "phase": phase, **describe(record)}

"""A run's two entries in its channel's durable log: the message it answers, and its reply.

The message is logged as soon as it is accepted, even when the run never starts (a stop or a
shutdown while it waited), so the log shows everything people sent.
"""

from __future__ import annotations

import logging

from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.scheduler import Run
from iris_runtime.engine.sessions import SessionStore
from iris_runtime.engine.usage import usage_to_json

log = logging.getLogger(__name__)


def log_message(sessions: SessionStore, run: Run, **extra: object) -> None:
    event = run.event
    sessions.append_message(
        run.channel,
        "user",
        event.text,
        user=event.user,
        runId=run.run_id,
        transport=run.transport_id,
        attachments=[a.local for a in event.attachments],
        **extra,
    )


def log_reply(sessions: SessionStore, run: Run, result: RunResult) -> None:
    """Log the reply; a failure to is logged, never raised (the run has finished anyway)."""
    try:
        extra: dict[str, object] = {}
        if result.agent:
            extra["agent"] = result.agent
        sessions.append_message(
            run.channel,
            "assistant",
            result.text,
            runId=run.run_id,
            status=result.status,
            transport=run.transport_id,
            usage=usage_to_json(result.usage),
            turns=[usage_to_json(u) for u in result.turn_usage],
            **extra,
        )
    except Exception:
        log.exception("could not log the reply of run %s", run.run_id)

"""A run's result from how it ended: the agent loop's outcome, or an exception.

Whatever the ending, the run's waiters get the text it produced and, for a failure, a note in
the conversation saying why."""

from __future__ import annotations

import logging

from iris_runtime.engine.agent import AgentOutcome
from iris_runtime.engine.output import RunSink
from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.scheduler import Run
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)


def crashed_result(run: Run, sink: RunSink, exc: Exception) -> RunResult:
    """A run that raised: its waiters still get what it said, then why it ended."""
    code = exc.code if isinstance(exc, IrisError) else "run_crashed"
    note = f"(run failed: {exc})"
    try:
        sink.respond_in_thread(note)
        text = sink.accumulated() or note
    except Exception:  # the transport itself may be what broke
        log.exception("could not report the crash of run %s", run.run_id)
        text = note
    return RunResult(run.run_id, "failed", text, str(exc), code)


def outcome_result(run: Run, outcome: AgentOutcome, accumulated: str, sink: RunSink) -> RunResult:
    turns = tuple(outcome.turn_usage)
    if outcome.status in {"failed", "max_turns"}:
        note = f"(run failed: {outcome.error})"
        sink.respond_in_thread(note)
        text = sink.accumulated() or note
        return RunResult(
            run.run_id, "failed", text, outcome.error, "run_failed", outcome.usage, turns
        )
    if outcome.usage.input_tokens or outcome.usage.output_tokens:
        sink.usage(outcome.usage)
    text = accumulated or "\n\n".join(outcome.replies)
    silent = outcome.silent and not outcome.replies
    return RunResult(
        run.run_id, outcome.status, text, usage=outcome.usage, turn_usage=turns, silent=silent
    )

"""Routers: a transport-neutral way to answer a message without Iris's own model turn.

Before a run starts its agent loop, the engine offers the message to each router (in the order
they were added). A router that recognises it — a leading ``@agent`` mention, say — answers it
itself and the model is never called. Every transport gets this for free, because it lives in the
run, not in the transports.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from iris_runtime.engine.output import RunSink
from iris_runtime.engine.provider import Usage
from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.transport import TransportEvent

if TYPE_CHECKING:
    from iris_runtime.engine.agent import RunOutput
    from iris_runtime.engine.scheduler import Run


@dataclass(frozen=True)
class RouteOutcome:
    text: str
    status: str = "done"  # done | stopped | failed
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    agent: str | None = None  # who answered, for per-agent usage
    silent: bool = False  # the answer is to say nothing: the engine posts nothing, as for [SILENT]


@dataclass(frozen=True)
class RouteRequest:
    event: TransportEvent
    transport_id: str
    status: Callable[[str], None]
    abort: threading.Event
    # ``with request.off_lane():`` around the wait for a remote reply frees the run's compute
    # slot meanwhile (see engine.lanes); a no-op where the caller has no lanes.
    off_lane: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    # The run's live output (text deltas, tool cards), for routers whose answer streams in;
    # None where the caller has none. The final text still goes in the RouteOutcome.
    output: RunOutput | None = None

    def slash_command(self, *names: str) -> tuple[str, str] | None:
        """``(name, rest)`` when the message is ``/name rest`` for one of ``names``, else None.

        Any case matches, and so does a command a chat platform addresses to one bot
        (``/name@iris_bot``). ``name`` comes back as given in ``names``, ``rest`` stripped."""
        match = _slash_command(names).fullmatch(self.event.text.strip())
        if match is None:
            return None
        typed = match.group(1)  # as written: "/AGENTS", or a Unicode case variant IGNORECASE allows
        name = next(n for n in names if re.fullmatch(re.escape(n), typed, re.IGNORECASE))
        return name, (match.group(2) or "").strip()


@functools.cache
def _slash_command(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(rf"/({alternatives})(?:@\S+)?(?:\s+(.*))?", re.DOTALL | re.IGNORECASE)


class MessageRouter(Protocol):
    def prompt_section(self) -> str:
        """Text added to the system prompt (e.g. the agents Iris can delegate to); may be ''."""
        ...

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        """Answer the message and return the outcome, or return None to let the model run."""
        ...


def route_run(
    routers: Sequence[MessageRouter],
    run: Run,
    sink: RunSink,
    off_lane: Callable[[], AbstractContextManager[None]],
) -> RunResult | None:
    """The run answered by the first router that takes it, or None: the model's turn."""
    request = RouteRequest(
        run.event, run.transport_id, sink.status, run.abort, off_lane, output=sink
    )
    for router in routers:
        outcome = router.route(request)
        if outcome is None:
            continue
        if outcome.silent:  # as for Iris's own silent runs: no reply, no placeholder
            sink.delete_message()
        elif outcome.text:
            sink.respond(outcome.text)
        code = "route_failed" if outcome.status == "failed" else None
        text = sink.accumulated() or outcome.text
        return RunResult(
            run.run_id,
            outcome.status,
            text,
            outcome.error,
            code,
            usage=outcome.usage,
            agent=outcome.agent,
            silent=outcome.silent,
        )
    if run.event.agent is not None:  # meant for an agent: never Iris's model instead
        note = f"(no agent named {run.event.agent!r} can answer here)"
        sink.respond(note)
        return RunResult(run.run_id, "failed", note, note, "route_failed")
    return None

"""What the bridge crash trials share: the runs a trial delegates, the moment it kills at, and
how it counts the outcomes of one delegated turn.

A trial delegates ``@agent [job N]`` from an API session of Iris to a sub-agent, kills one side
at a moment chosen for it (:class:`Moment`) and then counts, from the durable records only
(Iris's session log, the sub-agent's job log, ``iris bridge recover``), what became of that
turn. Every trial draws its run's shape and its kill moment from its own seed, so a failing
trial can be replayed: the seed is in the failure note, and ``IRIS_FAULT_SEED`` fixes it.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from iris_runtime.bridge.protocol import TERMINAL_TYPES
from iris_runtime.testing.server import IrisServer
from tests.bridge.fault_tools import log_entries, wait_for

SEED_VARIABLE = "IRIS_FAULT_SEED"
# Generous: the machine running the suite is shared and slow; none of these is expected to be
# reached, each only bounds a wait on a condition.
SETTLE_TIMEOUT = 180.0

Step = dict[str, Any]


# -- the delegated runs --------------------------------------------------------------------------


def _tool(seconds: float) -> Step:
    return {"tool": "bash", "args": {"command": f"sleep {seconds}; echo step"}}


# Each shape: the scripted turns of the sub-agent's run (ending with ``reply``), and how many
# seconds it sleeps on purpose. Together they cover a reply before any status, after one or two
# tool calls (status lines in the job log) and after a long silent stretch (heartbeats only).
SHAPES: dict[str, tuple[Callable[[str], list[list[Step]]], float]] = {
    "instant": (lambda reply: [[{"text": reply}]], 0.0),
    "one tool": (lambda reply: [[_tool(0.3)], [{"text": reply}]], 0.3),
    "two tools": (lambda reply: [[_tool(0.2)], [_tool(0.2)], [{"text": reply}]], 0.4),
    "thinking": (
        lambda reply: [[{"thinking": "weighing it"}, {"sleep": 0.6}, {"text": reply}]],
        0.6,
    ),
}


def job_text(trial: int) -> str:
    # Bracketed, so the scripted provider's substring match cannot take [job 1] for [job 12].
    return f"[job {trial}] please"


def reply_text(trial: int) -> str:
    return f"answer to job {trial}"


# The trial number of the round trip that measures the machine's pace before the trials.
WARM_UP = -1


def ping_text(trial: int) -> str:
    return f"[ping {trial}]"


def pong_text(trial: int) -> str:
    return f"pong {trial}"


def ping_rule(trial: int) -> dict[str, Any]:
    return {"when": ping_text(trial), "turns": [[{"text": pong_text(trial)}]]}


# -- the kill moment -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """How trial ``trial`` runs and when it kills: ``delay`` seconds after ``since``, or when
    execution reaches the failpoint ``point`` (see ``iris_runtime.failpoints``)."""

    seed: str
    trial: int
    shape: str
    since: str
    delay: float = 0.0
    point: str | None = None

    def __str__(self) -> str:
        when = (
            f"at failpoint {self.point}" if self.point else f"{self.delay:.3f}s after {self.since}"
        )
        return f"seed {self.seed}, {self.shape!r} run, killed {when}"

    @property
    def rule(self) -> dict[str, Any]:
        """The sub-agent's script rule for this trial's job."""
        turns, _ = SHAPES[self.shape]
        return {"when": job_text(self.trial), "turns": turns(reply_text(self.trial))}


def base_seed() -> str:
    """This run's seed: ``IRIS_FAULT_SEED`` to replay one, else a fresh one."""
    return os.environ.get(SEED_VARIABLE) or secrets.token_hex(4)


def plan(base: str, trial: int, points: list[str], since: str, overhead: float) -> Moment:
    """Trial ``trial``'s shape and kill moment, from its own seed. Every third trial dies at a
    failpoint (taken in turn), the others after a random delay from ``since`` within the run's
    span: its deliberate sleeps plus ``overhead`` (a round trip measured in this run, so the
    span stretches with the machine's load; a replayed seed draws the same fraction of it)."""
    seed = f"{base}:{trial}"
    draw = random.Random(seed)
    shape = draw.choice(sorted(SHAPES))
    if points and trial % 3 == 2:
        return Moment(seed, trial, shape, since, point=points[(trial // 3) % len(points)])
    span = SHAPES[shape][1] + overhead
    return Moment(seed, trial, shape, since, delay=draw.uniform(0.0, span))


def write_script(path: Path, moments: list[Moment]) -> None:
    """The warm-up's rule and every trial's: the file is read on every model call, so it is
    replaced atomically, never rewritten under a run that might be reading it."""
    rules = [ping_rule(WARM_UP)] + [m.rule for m in moments] + [ping_rule(m.trial) for m in moments]
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"rules": rules}))
    temporary.replace(path)


# -- what became of a turn -----------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One delegated turn as Iris's session log holds it."""

    run_id: str
    request_id: str | None  # from the bridge_call marker, written before the call
    replies: list[dict[str, Any]]  # the assistant entries of that run

    def describe(self) -> str:
        shown = [(r.get("status"), str(r.get("text", ""))[:120]) for r in self.replies]
        return f"request {self.request_id}, Iris logged {shown}"


def turn_of(iris: IrisServer, session: str, text: str) -> Turn | None:
    """The turn started by the user message ``text`` in ``session``, read from the log file
    itself (it is there whether or not Iris is up); None until that message is logged."""
    entries = log_entries(iris, session)
    start = next(
        (i for i, e in enumerate(entries) if e.get("role") == "user" and e.get("text") == text),
        None,
    )
    if start is None:
        return None
    run_id = entries[start].get("runId")
    # The marker of this run is the first one after its user message.
    marker = next((e for e in entries[start:] if e.get("type") == "bridge_call"), None)
    replies = [e for e in entries if e.get("role") == "assistant" and e.get("runId") == run_id]
    request_id = str(marker["requestId"]) if marker else None
    return Turn(str(run_id), request_id, replies)


def wait_for_turn(iris: IrisServer, session: str, text: str) -> Turn:
    turn: Turn = wait_for(lambda: turn_of(iris, session, text), SETTLE_TIMEOUT, f"{text!r} logged")
    return turn


def wait_for_request_id(iris: IrisServer, session: str, text: str) -> str:
    """The request id of the turn, once its bridge_call marker is logged (before the call)."""

    def marked() -> str | None:
        turn = turn_of(iris, session, text)
        return turn.request_id if turn else None

    request_id: str = wait_for(marked, SETTLE_TIMEOUT, f"the bridge_call marker of {text!r}")
    return request_id


def job_events(agent_data: Path, request_id: str) -> list[dict[str, Any]] | None:
    """The sub-agent's job log of ``request_id``, or None when it never got the request."""
    path = agent_data / "bridge-jobs" / f"{request_id}.jsonl"
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    events = []
    for line in raw.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # torn by the kill: jobs.py skips it the same way
    return events


def terminal(events: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The event that ended a job (None: still running, or never received)."""
    if not events:
        return None
    last = events[-1]
    return last if last.get("type") in TERMINAL_TYPES else None


def wait_for_job_end(agent_data: Path, request_id: str) -> list[dict[str, Any]]:
    """The job log once it ends (a restarted agent closes what it left open, in the
    background)."""

    def ended() -> list[dict[str, Any]] | None:
        events = job_events(agent_data, request_id)
        return events if terminal(events) else None

    events: list[dict[str, Any]] = wait_for(ended, SETTLE_TIMEOUT, f"job {request_id} to end")
    return events


def terminals(events: list[dict[str, Any]] | None) -> int:
    return sum(1 for e in events or [] if e.get("type") in TERMINAL_TYPES)


# -- waiting -------------------------------------------------------------------------------------


def healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def wait_until_armed_point_fired(armed: Path, server: str) -> None:
    """A failpoint removes its file when it fires."""
    wait_for(lambda: not armed.exists(), SETTLE_TIMEOUT, f"the failpoint in {server} to fire")


def pause(seconds: float) -> None:
    """The chosen kill moment (not a wait for anything: the trial kills whatever is then)."""
    time.sleep(seconds)

"""A custom agent SIGKILLed at a random moment of a turn: the turn fails visibly exactly once, and
the agent's next turn answers, whichever shape the agent has.

One served Iris per shape serves every trial. Each trial is a session of its own: an ``@kind drip``
turn (the agent streams chunks slowly: :mod:`tests.faults.dripping_relay`,
:mod:`tests.faults.dripping_acp`), the agent SIGKILLed after a random delay within that turn's
span, then ``@kind echo back N``:

- a relay agent is a service Iris does not manage (spec 004: a systemd unit with ``Restart=``
  brings it back), so the test plays systemd and starts it again at once. The new process never
  heard of the killed turn, which ends by the relay contract's silence rule (shortened here);
- an ACP agent is Iris's own subprocess: the kill lands anywhere from its start (initialize,
  session/new) to the middle of the stream, and Iris starts a new process for the next turn.

The failure is counted where the owner sees it: the reply to the message, the session's history
and its live stream. ``lost``: a place that never showed it; ``duplicated``: one that showed it
twice. The follow-up turn's answer is counted the same way, as a kind of its own. Each trial's
seed (``IRIS_FAULT_SEED`` replays a run's draws) and kill moment are in the report of a failing
trial.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.server import HttpReply, IrisServer, free_port
from tests.custom_agents.acp_setup import alive, recorded
from tests.custom_agents.conftest import Setup, setup, wait_until, write_manifest
from tests.faults import dripping_acp
from tests.faults.dripping_relay import DrippingRelay
from tests.faults.tally import Tally, tally, trials
from tests.web.conftest import SSEReader, in_background

__all__ = ["setup"]  # the custom-agent suite's served Iris, used as a fixture here

DRIP_CHUNKS = 12
DRIP_PAUSE_MS = 150
# The relay's kill window. Its turn lasts a pause and a hold longer (under the silence limit), so
# a kill always lands before the turn could end, even one a loaded machine delivers late.
DRIP_SPAN = DRIP_CHUNKS * DRIP_PAUSE_MS / 1000
DRIP_HOLD_MS = 2500
RELAY_SILENCE_MS = 4000  # how a killed relay's turn ends (5 minutes in the product)
REPLY_TIMEOUT = 120.0  # generous: the machine is shared and loaded
SEED = os.environ.get("IRIS_FAULT_SEED") or secrets.token_hex(4)
# setup.cfg's 120 s per test would cut a long run short: a generous 30 s per trial instead.
per_trial_budget = pytest.mark.timeout(120 + 30 * trials())


@dataclass
class Trial:
    """One crash and its follow-up, kept until every trial has run and the counting starts."""

    number: int
    session: str
    seed: str
    delay: float  # seconds from ``since`` to the kill
    since: str
    stream: SSEReader
    crash: HttpReply | None = None  # None: no reply within REPLY_TIMEOUT (stuck)
    answer: HttpReply | None = None
    landed: str = ""  # what the killed agent had done, for the report

    @property
    def expected_answer(self) -> str:
        return f"You said: back {self.number}"

    def shown(self) -> str:
        return f"(seed {self.seed}: killed {self.delay:.3f} s after {self.since}, {self.landed})"


def kill_delay(seed: str, span: float) -> float:
    """The trial's kill moment: uniform within ``span``, the same for the same seed."""
    return random.Random(seed).uniform(0.0, span)


def reply_or_none(pending: Callable[[float], HttpReply]) -> HttpReply | None:
    """The reply of a call started in the background, or None if it never came (stuck)."""
    try:
        return pending(REPLY_TIMEOUT)
    except AssertionError:
        return None


def followed_up(
    setup: Setup, trial: Trial, pending: Callable[[float], HttpReply], kind: str
) -> Trial:
    """``trial`` with the killed turn's reply (``pending``) and the answer to a follow-up in
    the same chat, asked of agent ``kind`` once the kill is over."""
    trial.crash = reply_or_none(pending)
    follow_up = f"@{kind} echo back {trial.number}"
    trial.answer = reply_or_none(in_background(lambda: setup.ask(trial.session, follow_up)))
    wait_for_final(trial.stream, trial.expected_answer)
    return trial


# -- counting ------------------------------------------------------------------------------------


def failure_marker(kind: str) -> str:
    return f"({kind} failed: "


def reply_text(reply: HttpReply | None) -> str:
    if reply is None:
        return ""
    text = reply.json().get("text")
    return text if isinstance(text, str) else ""


def failed_replies(reply: HttpReply | None, kind: str) -> int:
    return int(
        reply is not None and reply.status == 502 and failure_marker(kind) in reply_text(reply)
    )


def answered_replies(reply: HttpReply | None, expected: str) -> int:
    return int(reply is not None and reply.status == 200 and reply_text(reply).endswith(expected))


def history_of(iris: IrisServer, session: str) -> list[dict[str, Any]]:
    reply = iris.get(f"/sessions/{session}/history?all=1")
    assert reply.status == 200, reply.body
    entries: list[dict[str, Any]] = reply.json()["entries"]
    return [e for e in entries if e.get("role") == "assistant"]


def failures_in_history(entries: list[dict[str, Any]], kind: str) -> int:
    return sum(e.get("status") == "failed" and failure_marker(kind) in e["text"] for e in entries)


def answers_in_history(entries: list[dict[str, Any]], expected: str) -> int:
    return sum(e.get("status") == "done" and e["text"].endswith(expected) for e in entries)


def finals(stream: SSEReader) -> list[str]:
    return [str(e.get("text", "")) for e in stream.events if e["event"] == "final"]


def one_figure(places: Mapping[str, int]) -> int:
    """What a trial saw, from the counts of every place that must show it once: a place that
    missed it makes the trial a loss, else one that showed it twice a duplicate."""
    fewest = min(places.values())
    return fewest if fewest < 1 else max(places.values())


def count_trials(iris: IrisServer, kind: str, done: list[Trial], label: str) -> list[Tally]:
    """Record every trial in two tallies: the visible failure, and the follow-up's answer."""
    failed = tally(f"{label} SIGKILLed mid-turn: the turn fails visibly")
    answered = tally(f"{label} SIGKILLed mid-turn: the next turn answers")
    for trial in done:
        entries = history_of(iris, trial.session)
        shown = finals(trial.stream)
        failures = {
            "reply": failed_replies(trial.crash, kind),
            "history": failures_in_history(entries, kind),
            "stream": sum(failure_marker(kind) in text for text in shown),
        }
        answers = {
            "reply": answered_replies(trial.answer, trial.expected_answer),
            "history": answers_in_history(entries, trial.expected_answer),
            "stream": sum(text.endswith(trial.expected_answer) for text in shown),
        }
        # Anything else the session shows (a partial reply beside the notice, a stray final)
        # is a second outcome of one of the two turns.
        extra = max(len(entries) - 2, 0) + max(len(shown) - 2, 0)
        seen = one_figure(failures)
        failed.record(
            expected=1,
            seen=seen + extra if seen else 0,
            what=f"{failures} (+{extra} other entries) {trial.shown()}",
        )
        answered.record(expected=1, seen=one_figure(answers), what=f"{answers} {trial.shown()}")
    return [failed, answered]


def assert_all_clean(tallies: list[Tally]) -> None:
    """Every tally's figure is zero; otherwise every failing trial is reported, of all of them."""
    problems = [t.line() + "\n" + "\n".join(t.notes) for t in tallies if t.lost or t.duplicated]
    assert not problems, "\n".join(problems)


# -- streams ---------------------------------------------------------------------------------------


@pytest.fixture
def streams() -> Iterator[list[SSEReader]]:
    """Live streams opened by the trials; closed at the end whatever happened."""
    opened: list[SSEReader] = []
    yield opened
    for stream in opened:
        stream.close()


def watch(iris: IrisServer, session: str, opened: list[SSEReader]) -> SSEReader:
    """Watch ``session`` from before its first message. The stream of the trial before stays
    open until now, so whatever that trial would still have shown has had a whole trial's time
    to arrive (and be counted as a duplicate)."""
    if opened:
        opened[-1].close()
    stream = SSEReader(iris, session)
    assert stream.status == 200, stream.status
    opened.append(stream)
    return stream


def wait_for_final(stream: SSEReader, expected: str) -> None:
    """The follow-up's answer reached the stream (or a loss, counted later, after the wait)."""
    try:
        stream.wait_for(lambda evs: any(f.endswith(expected) for f in finals(stream)), 60)
    except AssertionError:
        return


# -- relay agents ----------------------------------------------------------------------------------


def start_relay(setup: Setup) -> DrippingRelay:
    agent = DrippingRelay(free_port(), setup.socket_path, setup.tmp_path / "butler.jsonl")
    setup.agents.append(agent.start())
    manifest = {"kind": "butler", "relay": f"http://127.0.0.1:{agent.port}/inbound"}
    write_manifest(setup.agents_d, "butler.json", manifest)
    return agent


def relay_landed(agent: DrippingRelay, seen_before: int) -> str:
    """How far the killed turn had got, from what the agent recorded during this trial."""
    entries = agent.entries()[seen_before:]
    deltas = sum(e.get("op") == "turn.delta" and e["reply"] == {"ok": True} for e in entries)
    return f"after the POST and {deltas} of {DRIP_CHUNKS} deltas"


def relay_trial(setup: Setup, agent: DrippingRelay, number: int, opened: list[SSEReader]) -> Trial:
    assert setup.iris is not None
    session = f"relay{number}"
    seed = f"{SEED}-relay-{number}"
    # Measured from the POST's arrival: the kill lands while the POST is answered or between
    # any two deltas (the drip starts once the POST is accepted and lasts longer than this).
    delay = kill_delay(seed, DRIP_SPAN)
    stream = watch(setup.iris, session, opened)
    trial = Trial(number, session, seed, delay, "the POST arrived", stream)
    posts_before, seen_before = len(agent.posts("message")), len(agent.entries())
    text = f"@butler drip {DRIP_CHUNKS} {DRIP_PAUSE_MS} {DRIP_HOLD_MS}"
    pending = in_background(lambda: setup.ask(session, text))
    wait_until(lambda: len(agent.posts("message")) > posts_before, timeout=REPLY_TIMEOUT)
    time.sleep(trial.delay)  # the chosen kill moment, not a wait for anything
    agent.kill()
    trial.landed = relay_landed(agent, seen_before)
    # Back at once, as systemd's Restart= would: a new process that never heard of the turn.
    agent.start()
    return followed_up(setup, trial, pending, "butler")


@pytest.mark.slow
@per_trial_budget
def test_a_relay_agent_killed_mid_turn_fails_the_turn_once(
    setup: Setup, streams: list[SSEReader]
) -> None:
    agent = start_relay(setup)
    iris = setup.serve(IRIS_RELAY_SILENCE_MS=str(RELAY_SILENCE_MS))
    done = [relay_trial(setup, agent, n, streams) for n in range(trials())]
    assert_all_clean(count_trials(iris, "butler", done, "relay agent"))


# -- ACP agents ------------------------------------------------------------------------------------


def agent_pids(record: Path) -> set[int]:
    """The live processes of the ACP agent that writes ``record`` (this test's Iris started
    them): found by the record's path on their command line."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(record).encode() in argv and alive(int(proc.name)):
            found.add(int(proc.name))
    return found


def new_agent_pid(record: Path, before: set[int]) -> int:
    """The process Iris starts for this turn: each trial is a new chat, so a new process, and
    the one in ``before`` (the chat that ran last) is being killed by Iris meanwhile."""
    started: set[int] = wait_until(lambda: agent_pids(record) - before, timeout=REPLY_TIMEOUT)
    return min(started)


def prompted(record: Path, pid: int) -> bool:
    return any(line["pid"] == pid for line in recorded(record, "session/prompt"))


def acp_startup_seconds(setup: Setup, record: Path) -> float:
    """How long a new agent process takes, on this machine now, from appearing to its prompt:
    the first part of the span a kill may land in."""
    before = agent_pids(record)
    pending = in_background(lambda: setup.ask("acp-warmup", "@coder echo warm"))
    pid = new_agent_pid(record, before)
    appeared = time.monotonic()
    wait_until(lambda: prompted(record, pid), timeout=REPLY_TIMEOUT)
    startup = time.monotonic() - appeared
    assert reply_text(reply_or_none(pending)) == "You said: warm"
    return startup


def acp_landed(record: Path, pid: int) -> str:
    """Which requests the killed process had received, from what it recorded."""
    methods = [line["method"] for line in recorded(record) if line["pid"] == pid]
    return "after " + (", ".join(methods) if methods else "nothing (still starting)")


def acp_trial(
    setup: Setup, record: Path, span: float, number: int, opened: list[SSEReader]
) -> Trial:
    assert setup.iris is not None
    session = f"acp{number}"
    seed = f"{SEED}-acp-{number}"
    # Measured from the new process's appearance: its start (initialize, session/new), the
    # drip, then the held prompt. The hold outlasts the whole span, so every kill lands before
    # the turn could end, however much faster this start is than the measured one.
    delay = kill_delay(seed, span)
    stream = watch(setup.iris, session, opened)
    trial = Trial(number, session, seed, delay, "the agent process appeared", stream)
    before = agent_pids(record)
    text = f"@coder drip {DRIP_CHUNKS} {DRIP_PAUSE_MS} {int(span * 1000)}"
    pending = in_background(lambda: setup.ask(session, text))
    pid = new_agent_pid(record, before)
    time.sleep(trial.delay)  # the chosen kill moment, not a wait for anything
    os.kill(pid, signal.SIGKILL)
    trial.landed = acp_landed(record, pid)
    return followed_up(setup, trial, pending, "coder")  # Iris starts a process again, on demand


@pytest.mark.slow
@per_trial_budget
def test_an_acp_agent_killed_mid_turn_fails_the_turn_once(
    setup: Setup, streams: list[SSEReader]
) -> None:
    record = setup.tmp_path / "coder-acp.jsonl"
    write_manifest(setup.agents_d, "coder.json", dripping_acp.manifest("coder", record))
    iris = setup.serve()
    # Half again the measured start: room for a slower one, so kills also land in the drip.
    span = 1.5 * acp_startup_seconds(setup, record) + DRIP_SPAN
    done = [acp_trial(setup, record, span, n, streams) for n in range(trials())]
    assert_all_clean(count_trials(iris, "coder", done, "ACP agent"))

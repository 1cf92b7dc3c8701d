"""Exactly one outcome per delegated (bridge) turn, whichever side is killed and whenever.

1. The sub-agent is SIGKILLed (its whole process group, as a crash or the OOM killer of a
   service would) during a delegated run; Iris's supervisor starts it again. The turn ends in
   Iris's session log with exactly one outcome that tells the truth: the reply when the
   sub-agent's job log holds one (recovered by polling it), else one failure notice (the job
   was marked interrupted, or never reached the agent). The next message to it is answered.
2. Iris is SIGKILLed during a delegated run and started again. Nobody polls for that reply any
   more (docs/bridge.md); ``iris bridge recover`` prints it, exactly once, from the sub-agent's
   job log, and Iris's session log holds at most the one copy she logged before she died.

The kill moment is a random delay within the run's span, or (every third trial) a failpoint
at an exact step no outside timing hits; each trial's seed is in its failure note.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import iris_runtime
from iris_runtime.provision.process_service import ProcessService
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import SubAgent, register
from tests.bridge.fault_tools import Background, children_of, kill_hard, wait_for
from tests.faults.bridge_trials import (
    SETTLE_TIMEOUT,
    WARM_UP,
    Moment,
    Turn,
    base_seed,
    healthy,
    job_events,
    job_text,
    pause,
    ping_rule,
    ping_text,
    plan,
    pong_text,
    reply_text,
    terminal,
    terminals,
    wait_for_job_end,
    wait_for_request_id,
    wait_for_turn,
    wait_until_armed_point_fired,
    write_script,
)
from tests.faults.tally import Tally, tally, trials

pytestmark = pytest.mark.slow

StartIris = Callable[..., IrisServer]
StartSubAgent = Callable[..., SubAgent]
SPAWN = (sys.executable, "-m", "iris_runtime", "agents", "spawn")
REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
# Each kill doubles the supervisor's restart delay for that agent (it resets only after a
# minute of uptime), so the trials take turns over a few agents, each killed this often at most.
KILLS_PER_AGENT = 8
# Where the sub-agent is killed exactly: the job is logged but nothing went out yet; the reply
# is in the job log but not yet on the stream.
AGENT_POINTS = ["bridge.request_accepted", "bridge.job_logged.final"]
# Where Iris is killed exactly: the reply came back from the sub-agent, not yet logged.
IRIS_POINTS = ["bridge.reply_received"]


def ask(iris: IrisServer, session: str, agent: str, text: str) -> Background:
    """``@agent text`` in ``session``, on a thread: it blocks until the turn ends (or Iris
    dies under it, which the trial wanted)."""

    def send() -> int:
        body = {"text": f"@{agent} {text}"}
        with contextlib.suppress(OSError, http.client.HTTPException):
            return iris.post(f"/sessions/{session}/message", json_body=body, timeout=600).status
        return 0

    return Background(send)


def round_trip(iris: IrisServer, session: str, agent: str, trial: int) -> str | None:
    """Whether the next message to ``agent`` works: None when it answers, else what came
    back instead."""
    answer = iris.post(
        f"/sessions/{session}/message",
        json_body={"text": f"@{agent} {ping_text(trial)}"},
        timeout=SETTLE_TIMEOUT,
    )
    text = answer.json().get("text") if answer.status in (200, 502) else answer.body[:200]
    return None if text == pong_text(trial) else f"HTTP {answer.status}: {text!r}"


def measure_overhead(iris: IrisServer, agent: str) -> float:
    """One delegated round trip, for the span kill delays are drawn from."""
    started = time.monotonic()
    failure = round_trip(iris, "warm-up", agent, WARM_UP)
    assert failure is None, failure
    return time.monotonic() - started


def verdict(
    figures: Tally, moment: Moment, seen: int, detail: str, next_failure: str | None
) -> list[str]:
    """Count the trial's outcomes (``seen`` of the one expected); what broke, if the next
    message failed (``next_failure``, from :func:`round_trip`)."""
    figures.record(expected=1, seen=seen, what=f"({moment}; {detail})")
    if next_failure is None:
        return []
    return [f"trial {moment.trial} ({moment}): the next message failed: {next_failure}"]


# -- 1. the sub-agent is killed; its supervisor starts it again ---------------------------------


@dataclass(frozen=True)
class Supervised:
    """A sub-agent spawned in process mode: Iris's supervisor runs it."""

    name: str
    api_port: int
    home: Path
    armed: Path  # its IRIS_FAILPOINT_FILE

    def pid(self, iris: IrisServer) -> int | None:
        row = ProcessService(iris.data_dir).status(self.name)
        return row.pid if row is not None and row.state == "running" else None

    def running(self, iris: IrisServer, not_pid: int | None = None) -> int | None:
        """Its pid once the supervisor reports it running (another than ``not_pid``) and it
        answers /health."""
        pid = self.pid(iris)
        return pid if pid and pid != not_pid and healthy(self.api_port) else None

    def kill(self, iris: IrisServer) -> int:
        """SIGKILL its whole process group (gunicorn's master and worker): nothing is left to
        serve, so only the supervisor can bring it back."""
        pid = wait_for(lambda: self.pid(iris), SETTLE_TIMEOUT, f"{self.name}'s pid")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        return int(pid)


def cli_environment(iris: IrisServer) -> dict[str, str]:
    """What a CLI on Iris's host sees: her own settings."""
    return clean_environment(
        **{k: v for k, v in iris.environment().items() if k.startswith("IRIS_")}
    )


def spawn_agents(iris: IrisServer, count: int, folder: Path) -> list[Supervised]:
    """``iris agents spawn`` (process mode), all at once: they start in parallel."""
    names = [f"crash{i}" for i in range(count)]
    spawns = [
        subprocess.Popen(
            [*SPAWN, name, "--json", "--env", f"IRIS_FAILPOINT_FILE={folder / name}.failpoint"],
            env=cli_environment(iris),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    agents = []
    for name, spawn in zip(names, spawns, strict=True):
        out, err = spawn.communicate(timeout=600)
        assert spawn.returncode == 0, err
        made = json.loads(out)
        agents.append(
            Supervised(name, made["api_port"], Path(made["home"]), folder / f"{name}.failpoint")
        )
    return agents


@pytest.fixture
def supervising_iris(start_iris: StartIris, tmp_path: Path) -> IrisServer:
    """Iris in process mode (her supervisor runs the agents she spawns), on the scripted
    provider that the agents inherit."""
    first = random.randrange(20000, 40000, 200)
    script = tmp_path / "script.json"
    write_script(script, [])  # the warm-up's rule, until the trials are planned
    iris = start_iris(
        tmp_path / "iris",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS=f"{first}-{first + 49}",
        IRIS_SERVICE_MANAGER="process",
        IRIS_SUPERVISOR_BACKOFF_MS="1",
    )
    return iris  # her clean stop at teardown stops the agents she supervises


def test_a_killed_subagent_gives_exactly_one_outcome(
    supervising_iris: IrisServer, tmp_path: Path
) -> None:
    iris = supervising_iris
    script = Path(iris.env["IRIS_SCRIPT_FILE"])
    count = trials()
    agents = spawn_agents(iris, math.ceil(count / KILLS_PER_AGENT), tmp_path)
    overhead = measure_overhead(iris, agents[0].name)
    seed = base_seed()
    moments = [plan(seed, n, AGENT_POINTS, "Iris was asked", overhead) for n in range(count)]
    write_script(script, moments)
    figures = tally("bridge: sub-agent SIGKILLed mid-run, restarted by its supervisor")
    broken: list[str] = []
    for moment in moments:
        agent = agents[moment.trial % len(agents)]
        seen, detail = agent_kill_trial(iris, agent, moment)
        failure = round_trip(iris, f"agent-kill-{moment.trial}", agent.name, moment.trial)
        broken += verdict(figures, moment, seen, detail, failure)
    figures.assert_clean()
    assert not broken, "\n".join(broken)


def agent_kill_trial(iris: IrisServer, agent: Supervised, moment: Moment) -> tuple[int, str]:
    """One trial: delegate, kill the agent at ``moment``, wait for it to be back; how many
    truthful outcomes Iris logged for the turn (all of them when there are several)."""
    session = f"agent-kill-{moment.trial}"
    text = f"@{agent.name} {job_text(moment.trial)}"
    if moment.point:
        agent.armed.write_text(moment.point)
    pending = ask(iris, session, agent.name, job_text(moment.trial))
    if moment.point:
        # The failpoint kills only the worker (gunicorn would fork another); the rest of the
        # group goes too, so that here as well it is the supervisor that brings the agent back.
        wait_until_armed_point_fired(agent.armed, agent.name)
    else:
        pause(moment.delay)
    killed = agent.kill(iris)
    pending.join(SETTLE_TIMEOUT * 2)  # Iris lives: the turn ends, with a reply or a notice
    wait_for(lambda: agent.running(iris, not_pid=killed), SETTLE_TIMEOUT, f"{agent.name} back")
    turn = wait_for_turn(iris, session, text)
    events = job_events(agent.home, turn.request_id) if turn.request_id else None
    if events is not None:
        events = wait_for_job_end(agent.home, str(turn.request_id))
    return truthful_outcomes(turn, events), describe(turn, events)


def truthful_outcomes(turn: Turn, events: list[dict[str, object]] | None) -> int:
    """The reply the job log holds, or a failure notice when it holds none; every outcome when
    Iris logged more than one, and every extra terminal event of the job."""
    end = terminal(events)
    doubled = max(terminals(events) - 1, 0)
    if len(turn.replies) > 1:
        return len(turn.replies) + doubled
    if end is not None and end.get("type") == "final":
        truthful = [r for r in turn.replies if r.get("text") == end.get("text")]
    else:
        truthful = [r for r in turn.replies if r.get("status") == "failed"]
    return len(truthful) + doubled


def describe(turn: Turn, events: list[dict[str, object]] | None) -> str:
    end = terminal(events)
    job = "never received" if events is None else f"job ended with {end}"
    return f"{turn.describe()}; {job}"


# -- 2. Iris is killed; `iris bridge recover` fetches the reply ---------------------------------


def test_a_reply_outlives_a_killed_iris_through_bridge_recover(
    start_subagent: StartSubAgent, start_iris: StartIris, tmp_path: Path
) -> None:
    count = trials()
    sub = start_subagent("helper", rules=[ping_rule(WARM_UP)])
    armed = tmp_path / "iris.failpoint"
    iris = start_iris(tmp_path / "iris", IRIS_FAILPOINT_FILE=str(armed))
    register(iris, "helper", sub.bridge_url, token=sub.token)
    overhead = measure_overhead(iris, "helper")
    seed = base_seed()
    moments = [plan(seed, n, IRIS_POINTS, "the job was logged", overhead) for n in range(count)]
    write_script(sub.script, moments)
    figures = tally("bridge: Iris SIGKILLed mid-run, reply fetched by iris bridge recover")
    broken: list[str] = []
    for moment in moments:
        seen, detail = iris_kill_trial(iris, "helper", sub.server.data_dir, armed, moment)
        failure = round_trip(iris, f"iris-kill-{moment.trial}", "helper", moment.trial)
        broken += verdict(figures, moment, seen, detail, failure)
    figures.assert_clean()
    assert not broken, "\n".join(broken)


def test_a_reply_outlives_a_killed_iris_that_supervises_the_agent(
    supervising_iris: IrisServer, tmp_path: Path
) -> None:
    """As above, with the agent Iris's own supervisor runs (process mode): the agent outlives
    her, the next Iris adopts it rather than replacing it, and its run finishes."""
    iris = supervising_iris
    count = trials()
    [agent] = spawn_agents(iris, 1, tmp_path)
    overhead = measure_overhead(iris, agent.name)
    moments = [plan(base_seed(), n, [], "the job was logged", overhead) for n in range(count)]
    write_script(Path(iris.env["IRIS_SCRIPT_FILE"]), moments)
    figures = tally("bridge: Iris SIGKILLed mid-run with the agent she supervises, recovered")
    broken: list[str] = []
    adopted = agent.pid(iris)
    for moment in moments:
        seen, detail = iris_kill_trial(iris, agent.name, agent.home, tmp_path / "none", moment)
        if agent.pid(iris) != adopted:  # each restarted Iris watches the same process
            broken.append(f"trial {moment.trial}: the agent was replaced, not adopted")
        failure = round_trip(iris, f"iris-kill-{moment.trial}", agent.name, moment.trial)
        broken += verdict(figures, moment, seen, detail, failure)
    figures.assert_clean()
    assert not broken, "\n".join(broken)


def iris_kill_trial(
    iris: IrisServer, agent: str, jobs: Path, armed: Path, moment: Moment
) -> tuple[int, str]:
    """One trial: delegate, kill Iris at ``moment`` once ``agent`` (its job logs in ``jobs``)
    has the request, start her again, recover the reply by hand; how many copies arrived."""
    session = f"iris-kill-{moment.trial}"
    text = f"@{agent} {job_text(moment.trial)}"
    if moment.point:
        armed.write_text(moment.point)
    worker = serving_worker(iris)
    pending = ask(iris, session, agent, job_text(moment.trial))
    request_id = wait_for_request_id(iris, session, text)
    # The delegated run exists once the sub-agent logged the job: the span starts there.
    wait_for(lambda: job_events(jobs, request_id) is not None, SETTLE_TIMEOUT, "the job log")
    if moment.point:
        wait_until_armed_point_fired(armed, "Iris")
        # The worker (all of Iris but the socket) died; gunicorn's master starts another.
        wait_for(lambda: serving_worker(iris) not in (None, worker), SETTLE_TIMEOUT, "a worker")
        wait_for(lambda: healthy(iris.port), SETTLE_TIMEOUT, "Iris back")
    else:
        pause(moment.delay)
        kill_hard(iris)
        iris.start()
    pending.join(SETTLE_TIMEOUT)
    events = wait_for_job_end(jobs, request_id)
    recovered = recover(iris, agent, request_id)
    turn = wait_for_turn(iris, session, text)
    copies = recovered.splitlines().count(reply_text(moment.trial))
    extra = max(len(turn.replies) - 1, 0) + max(terminals(events) - 1, 0)
    return copies + extra, f"{turn.describe()}; recover printed {recovered!r}"


def serving_worker(iris: IrisServer) -> int | None:
    """The pid of Iris's gunicorn worker, where her engine runs."""
    assert iris.process is not None
    workers = children_of(iris.process.pid)
    return workers[0] if len(workers) == 1 else None


def recover(iris: IrisServer, agent: str, request_id: str) -> str:
    """``iris bridge recover AGENT REQUEST_ID``: what it printed (its errors too)."""
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    done = run_iris("bridge", "recover", agent, request_id, env=env, timeout=SETTLE_TIMEOUT)
    return done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"

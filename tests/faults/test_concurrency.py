"""Many at once: 50 concurrent writers of ``agents.json`` and 50 concurrent scheduled events.

* 50 ``iris agents register`` processes against one data dir: 40 new agents and 10 merging a
  secret each into one shared agent (a read-modify-write that a lost update would show);
* 50 ``iris agents ensure`` processes creating 50 agents at once, in process mode (a real Iris
  supervising real sub-agent processes), each choosing its ports under the registry lock.

While they run, a sampler reads ``agents.json`` as any reader does (no lock) and checks every
version it sees: it parses as JSON and its mode is 0600. Then every promised entry must be there.

* 50 event files dropped at once (half renamed into place, half written where they are read)
  and 50 ``POST /events`` at once, spread over five channels (more than a channel's queue
  holds), each must run to its end exactly once, counted after a restart as in the crash
  trials (see ``event_runs``).

Each concurrent call is one trial of its kind in the tally.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import iris_runtime
from iris_runtime.provision.supervised import SupervisedStore, process_alive
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.faults.event_runs import (
    drop,
    drop_in_place,
    finished_runs,
    immediate,
    post,
    restart_and_drain,
)
from tests.faults.tally import Tally, tally

Start = Callable[..., IrisServer]
CONCURRENT = 50
CHANNELS = [f"SESSION-many{n}" for n in range(5)]
REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
PRIVATE = 0o600
# How long 50 events may take before the drain begins: pacing, not a verdict.
PACING_SECONDS = 300.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


# -- agents.json under many writers -----------------------------------------------------------


@dataclass
class Sampler:
    """Reads ``agents.json`` in a loop while writers run; what it saw."""

    path: Path
    samples: int = 0
    torn: list[str] = field(default_factory=list)  # versions that did not parse
    modes: set[int] = field(default_factory=set)  # the modes of the versions read
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample_once(self) -> None:
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            # The mode of the very version read (the name may be replaced meanwhile).
            self.modes.add(stat.S_IMODE(os.fstat(handle.fileno()).st_mode))
            raw = handle.read()
        self.samples += 1
        try:
            json.loads(raw)
        except ValueError:
            self.torn.append(raw[:200].decode(errors="replace"))

    def run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        thread = threading.Thread(target=self.run, name="agents-json-sampler", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self.sample_once()  # and the final version

    def assert_sound(self) -> None:
        assert self.samples > 0, "the sampler never saw agents.json"
        assert self.torn == [], f"{len(self.torn)} of {self.samples} reads were not JSON"
        assert self.modes == {PRIVATE}, f"agents.json modes seen: {sorted(map(oct, self.modes))}"


def all_at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released together; their results in order."""
    start = threading.Barrier(len(calls))

    def released(call: Callable[[], Any]) -> Any:
        start.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(released, calls))


def registry(data: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((data / "agents.json").read_text())
    return loaded


def no_temp_files_left(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.name.startswith(".") or ".tmp" in p.name)


def record_call(
    figures: Tally, done: subprocess.CompletedProcess[str], present: bool, what: str
) -> None:
    """One concurrent call: its promise (a registered entry) is there or lost."""
    why = "" if done.returncode == 0 else f" (exit {done.returncode}: {done.stderr.strip()[-300:]})"
    figures.record(expected=1, seen=int(present), what=what + why)


def test_concurrent_agents_register_lose_no_entry(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    env = clean_environment(IRIS_DATA_DIR=str(data))
    first = run_iris("agents", "register", "shared", "http://127.0.0.1:4999", env=env)
    assert first.returncode == 0, first.stderr
    calls: list[tuple[str, list[str]]] = []
    for n in range(CONCURRENT):
        if n % 5 == 4:  # every fifth call merges a secret into the shared agent
            calls.append(
                (f"SECRET_{n}", ["shared", "http://127.0.0.1:4999", "--secret", f"SECRET_{n}"])
            )
        else:
            calls.append((f"agent-{n}", [f"agent-{n}", f"http://127.0.0.1:{5000 + n}"]))
    sampler = Sampler(data / "agents.json")
    with sampler.running():
        results = all_at_once(
            [lambda a=args: run_iris("agents", "register", *a, env=env) for _, args in calls]
        )
    entries = registry(data)
    figures = tally("concurrent agents register")
    for (promise, args), done in zip(calls, results, strict=True):
        if promise.startswith("SECRET_"):
            present = promise in entries["shared"]["secrets"]
        else:
            present = entries.get(promise, {}).get("bridge_url") == args[1]
        record_call(figures, done, present, promise)
    figures.assert_clean()
    sampler.assert_sound()
    assert stat.S_IMODE((data / "agents.json").stat().st_mode) == PRIVATE
    assert no_temp_files_left(data) == []
    assert all(done.returncode == 0 for done in results)


# -- agents ensure: 50 sub-agents spawned at once ----------------------------------------------


def port_block() -> str:
    """50 bridge ports (and their API ports, +100) in a block unlikely to be another test's."""
    first = random.randrange(20000, 30000, 200)
    return f"{first}-{first + 59}"


@pytest.fixture
def supervising_iris(start_iris: Start, tmp_path: Path) -> Iterator[IrisServer]:
    """Iris supervising its sub-agents as processes; at the end, no agent outlives the test."""
    iris = start_iris(
        tmp_path / "data",
        IRIS_PROVIDER="scripted",
        IRIS_MODEL="parent-model",
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS=port_block(),
        IRIS_SERVICE_MANAGER="process",
        IRIS_SUPERVISOR_BACKOFF_MS="200",
        # 50 Irises booting at once on a shared machine: readiness is bounded, not timed.
        IRIS_AGENT_HEALTH_TIMEOUT_SECONDS="900",
    )
    yield iris
    iris.stop()  # the supervisor stops every agent's process group with it
    stop_orphans(iris.data_dir)


def stop_orphans(data: Path) -> None:
    """Kill any agent process (the ones this test's Iris started) that outlived its Iris."""
    if not (data / "state.db").exists():
        return
    with SupervisedStore(data) as store:
        rows = store.all()
    for row in rows:
        if row.pid is not None and process_alive(row.pid, row.pid_start_time):
            # Each agent runs in a session of its own: the group is the agent's gunicorn.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(row.pid, signal.SIGKILL)


def test_concurrent_agents_ensure_lose_no_entry(supervising_iris: IrisServer) -> None:
    data = supervising_iris.data_dir
    env = supervising_iris.environment()
    names = [f"helper-{n}" for n in range(CONCURRENT)]
    sampler = Sampler(data / "agents.json")
    with sampler.running():
        results = all_at_once(
            [
                lambda n=name: run_iris("agents", "ensure", n, "--json", env=env, timeout=1200)
                for name in names
            ]
        )
    entries = registry(data)
    figures = tally("concurrent agents ensure")
    for name, done in zip(names, results, strict=True):
        created = done.returncode == 0 and json.loads(done.stdout)["action"] == "created"
        record_call(figures, done, created and name in entries, name)
    figures.assert_clean()
    sampler.assert_sound()
    assert stat.S_IMODE((data / "agents.json").stat().st_mode) == PRIVATE
    ports = [entries[name]["bridge_url"] for name in names]
    assert len(set(ports)) == CONCURRENT, "two agents were given one port"
    with SupervisedStore(data) as store:
        assert sorted(row.name for row in store.all()) == sorted(names)


# -- 50 events at once ----------------------------------------------------------------------


@pytest.fixture
def scripted_iris(start_iris: Start, tmp_path: Path) -> IrisServer:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"when": "[EVENT:", "turns": [[{"text": "ok"}]]}]}))
    return start_iris(
        tmp_path / "data",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_EVENTS_POLL_MS="100",
    )


def channel_of(n: int) -> str:
    return CHANNELS[n % len(CHANNELS)]


def wait_for_runs(iris: IrisServer, texts: list[str]) -> None:
    """Wait (bounded) until every event has run; only pacing, the tally comes after a drain."""
    deadline = time.monotonic() + PACING_SECONDS
    while time.monotonic() < deadline:
        if all(
            finished_runs(iris.data_dir, channel_of(n), [text])[text] >= 1
            for n, text in enumerate(texts)
        ):
            return
        time.sleep(0.1)


def tally_events(iris: IrisServer, kind: str, texts: list[str], promised: list[bool]) -> Tally:
    """Once they have run: restart, drain, and record each event (run to its end once?)."""
    wait_for_runs(iris, texts)
    sentinels = restart_and_drain(iris, CHANNELS, kind)
    figures = tally(kind)
    for n, (text, answered) in enumerate(zip(texts, promised, strict=True)):
        seen = finished_runs(iris.data_dir, channel_of(n), [text])[text]
        # An unanswered POST promised nothing more than "at most once".
        figures.record(expected=1 if answered else min(seen, 1), seen=seen, what=text)
    for n, text in enumerate(sentinels):
        assert finished_runs(iris.data_dir, CHANNELS[n], [text])[text] == 1
    return figures


def test_concurrent_event_files_each_run_once(scripted_iris: IrisServer) -> None:
    data = scripted_iris.data_dir
    texts = [f"event file {n:03d}" for n in range(CONCURRENT)]

    def writer(n: int) -> Callable[[], None]:
        # Half as careful writers do, half as careless ones (seen half-written, retried).
        write = drop if n % 2 else drop_in_place
        return lambda: write(data, f"many-{n:03d}", immediate(channel_of(n), texts[n]))

    all_at_once([writer(n) for n in range(CONCURRENT)])
    figures = tally_events(scripted_iris, "concurrent event files", texts, [True] * CONCURRENT)
    figures.assert_clean()


def test_concurrent_api_event_posts_each_run_once(scripted_iris: IrisServer) -> None:
    texts = [f"event post {n:03d}" for n in range(CONCURRENT)]

    def poster(n: int) -> Callable[[], bool]:
        body = immediate(channel_of(n), texts[n])
        return lambda: post(scripted_iris, f"posted-{n:03d}", body)

    answered = all_at_once([poster(n) for n in range(CONCURRENT)])
    assert all(answered), "Iris did not answer every POST (nothing was killed)"
    figures = tally_events(scripted_iris, "concurrent API event posts", texts, answered)
    figures.assert_clean()

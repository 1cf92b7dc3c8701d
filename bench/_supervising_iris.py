"""An Iris that supervises spawned agents (``IRIS_SERVICE_MANAGER=process``), and the ``iris``
CLI run against it with the same environment, as an operator's shell would: for
``spawn_agents``.

Every CLI run starts in its own session, so a Ctrl-C at the terminal reaches only the bench,
which then interrupts each run still going exactly once (a spawn interrupted so rolls itself
back: no unit, container or registration is left).
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from _servers import (
    HOST,
    Server,
    clean_env,
    log_tail,
    script,
    start_iris,
    stop_process,
    wait_healthy,
)

from iris_runtime.provision.process_groups import stop_recorded
from iris_runtime.provision.process_service import ProcessService

REPO = Path(__file__).resolve().parents[1]
SPAWN_TIMEOUT = 300.0


class Iris(NamedTuple):
    server: Server
    data_dir: Path
    env: dict[str, str]  # what `iris serve` runs with; the CLI gets the same


def start_supervising_iris(workdir: Path, extra: dict[str, str]) -> Iris:
    data_dir = workdir / f"iris-{secrets.token_hex(3)}"
    first = random.randrange(20000, 30000, 200)  # bridge ports; API ports are +100
    settings = {
        "IRIS_DATA_DIR": str(data_dir),
        "IRIS_AGENT_PORTS": f"{first}-{first + 99}",
        "IRIS_SERVICE_MANAGER": "process",
        "IRIS_REPO_DIR": str(REPO),
        **extra,
    }
    server = start_iris(workdir, extra_env=settings)
    try:
        wait_healthy(server.base_url, server.process, timeout=60)
    except RuntimeError as exc:
        stop_process(server.process)
        raise RuntimeError(f"iris: {exc}\n{log_tail(server.process)}") from None
    env = clean_env()
    env.update(
        {
            "IRIS_API_HOST": HOST,
            "IRIS_API_PORT": server.base_url.rsplit(":", 1)[1],
            "IRIS_API_TOKEN": server.token,
            "IRIS_PROVIDER": "offline",
            **settings,
        }
    )
    return Iris(server, data_dir, env)


_LIVE: set[subprocess.Popen[str]] = set()  # CLI runs not yet waited for


def cli(iris: Iris, *args: str) -> subprocess.Popen[str]:
    """Start one ``iris`` command in its own session (see the module's docstring)."""
    process = subprocess.Popen(
        [script("iris"), *args],
        env=iris.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _LIVE.add(process)
    return process


def finish(process: subprocess.Popen[str], what: str) -> str:
    """Wait for a CLI run; its stdout, or RuntimeError with its stderr."""
    try:
        out, err = process.communicate(timeout=SPAWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # a spawn rolls itself back on Ctrl-C
        out, err = process.communicate(timeout=SPAWN_TIMEOUT)
        raise RuntimeError(
            f"{what}: no answer after {SPAWN_TIMEOUT:.0f} s\n{err[-2000:]}"
        ) from None
    finally:
        if process.returncode is not None:
            _LIVE.discard(process)
    if process.returncode != 0:
        raise RuntimeError(f"{what}: exit {process.returncode}\n{err[-2000:]}")
    return out


def interrupt_cli_runs() -> None:
    """Ctrl-C to every CLI run still going and wait for them."""
    for process in list(_LIVE):
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
    for process in list(_LIVE):
        try:
            process.communicate(timeout=SPAWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        _LIVE.discard(process)


def spawn(iris: Iris, name: str, *extra: str) -> tuple[float, dict[str, object]]:
    """Run ``iris agents spawn NAME --json``; (wall seconds, its JSON summary)."""
    start = time.perf_counter()
    out = finish(cli(iris, "agents", "spawn", name, *extra, "--json"), f"spawn {name}")
    elapsed = time.perf_counter() - start
    summary: dict[str, object] = json.loads(out)
    return elapsed, summary


def remove_all(iris: Iris, names: Sequence[str]) -> list[str]:
    """``iris agents remove NAME --purge`` for each, concurrently, once any interrupted spawn
    has rolled back; the names that failed."""
    interrupt_cli_runs()
    start = time.perf_counter()
    running = [(name, cli(iris, "agents", "remove", name, "--purge")) for name in names]
    failed = []
    for name, process in running:
        try:
            finish(process, f"remove {name}")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            failed.append(name)
    if names:
        print(
            f"removed {len(names)} agents in {time.perf_counter() - start:.1f} s", file=sys.stderr
        )
    return failed


def agent_pgid(iris: Iris, name: str) -> int:
    row = ProcessService(iris.data_dir).status(name)
    if row is None or row.pid is None:
        raise RuntimeError(f"{name}: no supervised pid in state.db")
    return row.pid  # started with its own session: pgid == pid


@contextlib.contextmanager
def supervising_iris(workdir: Path, extra: dict[str, str] | None = None) -> Iterator[Iris]:
    """An Iris for the spawns; on exit every agent it still supervises is removed, Iris stopped,
    and any group it left behind stopped by its recorded pid (checked against its start time)."""
    iris = start_supervising_iris(workdir, extra or {})
    try:
        yield iris
    finally:
        try:
            interrupt_cli_runs()
            names = [row.name for row in ProcessService(iris.data_dir).processes()]
            if names:
                remove_all(iris, names)
        finally:
            stop_process(iris.server.process)
            for row in ProcessService(iris.data_dir).processes():
                if row.pid is not None:
                    stop_recorded(row.name, row.pid, row.pid_start_time)

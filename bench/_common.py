"""Shared helpers for the benchmarks in this folder (stdlib + ``requests`` only).

Every bench prints its figures as JSON lines through :func:`emit`. Servers are started as
subprocesses with their output in a log file inside a temporary directory; the API token is
passed through the environment, never on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NamedTuple

import requests

HOST = "127.0.0.1"
BIN_DIR = Path(sys.executable).parent

# Variables that would change how `iris serve` behaves if inherited from the caller's shell.
_IRIS_ENV_PREFIXES = ("IRIS_",)
_IRIS_ENV_NAMES = ("AGENT_NAME", "BRIDGE_PORT")
_LOGS: dict[int, Path] = {}  # server pid -> its log file

ECHO_APP = '''\
"""Bare WSGI echo app: the baseline for the Iris benchmarks."""

import json


def app(environ, start_response):
    method = environ["REQUEST_METHOD"]
    path = environ.get("PATH_INFO", "")
    status = "200 OK"
    if method == "GET" and path == "/health":
        body = b'{"status": "ok"}'
    elif method == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        try:
            body = json.dumps({"echo": json.loads(raw or b"null")}).encode()
        except ValueError:
            status, body = "400 Bad Request", b'{"error": "invalid json"}'
    else:
        status, body = "404 Not Found", b'{"error": "not found"}'
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
'''


class Server(NamedTuple):
    """A started server: the process (the gunicorn master), its base URL and its API token."""

    process: subprocess.Popen[bytes]
    base_url: str
    token: str


def script(name: str) -> str:
    """Path of a console script installed next to the running interpreter (i.e. in its venv)."""
    candidate = BIN_DIR / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found in {BIN_DIR} or on PATH")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _clean_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_IRIS_ENV_PREFIXES) and key not in _IRIS_ENV_NAMES
    }


def _popen(
    argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path
) -> subprocess.Popen[bytes]:
    log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - the child keeps its own copy
    try:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group, so a stuck server can be killed whole
        )
        _LOGS[process.pid] = log_path
        return process
    finally:
        log.close()


def start_iris(workdir: Path, *, extra_env: dict[str, str] | None = None) -> Server:
    """Start ``iris serve`` with a fresh data dir under ``workdir``; does not wait for health."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="iris-data-", dir=workdir))
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = _clean_env()
    env.update(
        {
            "IRIS_DATA_DIR": str(data_dir),
            "IRIS_API_HOST": HOST,
            "IRIS_API_PORT": str(port),
            "IRIS_API_TOKEN": token,
            "IRIS_PROVIDER": "offline",
        }
    )
    env.update(extra_env or {})
    process = _popen([script("iris"), "serve"], env, data_dir / "serve.log", workdir)
    return Server(process, f"http://{HOST}:{port}", token)


def start_echo(workdir: Path, *, threads: int = 32, source: str = ECHO_APP) -> Server:
    """Start the baseline: a bare WSGI echo app under gunicorn gthread with one worker, configured
    like Iris (same worker class, worker and thread count, keep-alive); does not wait for health.
    ``source`` replaces the app (its module must define ``app``), e.g. a WebSocket echo."""
    workdir.mkdir(parents=True, exist_ok=True)
    app_dir = Path(tempfile.mkdtemp(prefix="echo-", dir=workdir))
    (app_dir / "bench_echo_app.py").write_text(source, encoding="utf-8")
    port = free_port()
    argv = [
        script("gunicorn"),
        "--worker-class", "gthread",
        "--workers", "1",
        "--threads", str(threads),
        "--keep-alive", "5",
        "--no-control-socket",
        "--chdir", str(app_dir),
        "-b", f"{HOST}:{port}",
        "bench_echo_app:app",
    ]  # fmt: skip
    process = _popen(argv, _clean_env(), app_dir / "gunicorn.log", app_dir)
    return Server(process, f"http://{HOST}:{port}", "")


def log_tail(process: subprocess.Popen[bytes], lines: int = 30) -> str:
    """The end of a started server's log (for error messages)."""
    path = _LOGS.get(process.pid)
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_healthy(
    base_url: str,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = 30.0,
    interval: float = 0.005,
) -> float:
    """Poll ``GET /health`` until it answers 200; returns the time waited (seconds).

    Raises RuntimeError if ``process`` exits first or ``timeout`` passes."""
    start = time.perf_counter()
    deadline = start + timeout
    with requests.Session() as http:
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"server exited with code {process.returncode} before healthy")
            try:
                if http.get(f"{base_url}/health", timeout=1.0).status_code == 200:
                    return time.perf_counter() - start
            except requests.RequestException:
                pass
            if time.perf_counter() >= deadline:
                raise RuntimeError(f"{base_url}/health not ready after {timeout:.0f} s")
            time.sleep(interval)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, wait up to ``timeout``, then SIGKILL the process group it leads (it was started
    with its own session, so the group is exactly this server and its workers; the group is
    only signalled while the leader is unreaped, so its id cannot have been reused)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def temp_workdir(prefix: str = "iris-bench-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def running(kind: str, workdir: Path, timeout: float = 60.0) -> Iterator[Server]:
    """Start ``kind`` ("iris" or "echo") under ``workdir``, wait until healthy, stop on exit."""
    server = start_iris(workdir) if kind == "iris" else start_echo(workdir)
    try:
        try:
            wait_healthy(server.base_url, server.process, timeout=timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{kind}: {exc}\n{log_tail(server.process)}") from None
        yield server
    finally:
        stop_process(server.process)


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(value: float, baseline: float | None) -> float | None:
    if baseline is None or baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return None
    return value / baseline


def _rounded(value: float | None, digits: int = 3) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


def emit(
    bench: str,
    metric: str,
    value: float,
    unit: str,
    baseline: float | None = None,
    ratio: float | None = None,
) -> None:
    """Print one figure as a JSON line."""
    line = {
        "bench": bench,
        "metric": metric,
        "value": _rounded(value),
        "unit": unit,
        "baseline": _rounded(baseline),
        "ratio": _rounded(ratio),
    }
    print(json.dumps(line), flush=True)


def handle_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so ``finally`` blocks stop the servers we started
    (run_all sends SIGTERM to a bench that times out)."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def add_common_args(parser: argparse.ArgumentParser, default_seconds: float = 10.0) -> None:
    """Options every bench accepts, so ``run_all.py`` can forward them to each one."""
    parser.add_argument(
        "--seconds",
        type=float,
        default=default_seconds,
        help="length of each timed load phase (benches without one ignore it) [%(default)s]",
    )


# --- sub-agent (bridge) servers -------------------------------------------------------------


class SubAgent(NamedTuple):
    """A started sub-agent: its API server (``/health`` lives there), its bridge URL and its
    data dir."""

    server: Server
    bridge_url: str
    data_dir: Path


def write_script(path: Path, rules: list[dict[str, object]]) -> Path:
    """Write a ``scripted``-provider script (``{"rules": [...]}``) and return its path."""
    path.write_text(json.dumps({"rules": rules}), encoding="utf-8")
    return path


def start_subagent(
    workdir: Path,
    *,
    data_dir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    name: str = "helper",
) -> SubAgent:
    """Start ``iris serve`` as sub-agent ``name`` (``AGENT_NAME`` + ``BRIDGE_PORT``) with its API
    on its own port; a fresh data dir under ``workdir`` unless ``data_dir`` is given (an existing
    one is used as is). Does not wait for health."""
    workdir.mkdir(parents=True, exist_ok=True)
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="iris-agent-", dir=workdir))
    api_port = free_port()
    bridge_port = free_port()
    while bridge_port == api_port:
        bridge_port = free_port()
    token = secrets.token_urlsafe(32)
    env = _clean_env()
    env.update(
        {
            "AGENT_NAME": name,
            "BRIDGE_PORT": str(bridge_port),
            "IRIS_DATA_DIR": str(data_dir),
            "IRIS_API_HOST": HOST,
            "IRIS_API_PORT": str(api_port),
            "IRIS_API_TOKEN": token,
            "IRIS_PROVIDER": "offline",
        }
    )
    env.update(extra_env or {})
    log_path = workdir / f"serve-{name}-{api_port}.log"
    process = _popen([script("iris"), "serve"], env, log_path, workdir)
    server = Server(process, f"http://{HOST}:{api_port}", token)
    return SubAgent(server, f"http://{HOST}:{bridge_port}", data_dir)


@contextlib.contextmanager
def running_subagent(
    workdir: Path,
    *,
    data_dir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> Iterator[SubAgent]:
    """:func:`start_subagent`, wait until healthy, stop on exit."""
    agent = start_subagent(workdir, data_dir=data_dir, extra_env=extra_env)
    try:
        try:
            wait_healthy(agent.server.base_url, agent.server.process, timeout=timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"sub-agent: {exc}\n{log_tail(agent.server.process)}") from None
        yield agent
    finally:
        stop_process(agent.server.process)


# --- concurrent load ------------------------------------------------------------------------

# One request on a client's own session: (latency in ms, why it failed or None).
Request = Callable[[requests.Session], tuple[float, str | None]]


@dataclass
class LoadResult:
    latencies_ms: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, other: LoadResult) -> None:
        self.latencies_ms.extend(other.latencies_ms)
        self.elapsed_s += other.elapsed_s
        self.errors.extend(other.errors)

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_ms) / self.elapsed_s if self.elapsed_s else 0.0


def drive_clients(
    request_for: Callable[[int], Request],
    *,
    clients: int,
    seconds: float | None = None,
    per_client: Sequence[int] | None = None,
    name: str = "client",
) -> LoadResult:
    """Run ``clients`` threads, each posting back to back with ``request_for(index)`` on its own
    HTTP session, until ``seconds`` pass or each has made its ``per_client`` requests. All start
    together (a barrier), so the wall time is the load's, not the threads' start-up."""
    results = [LoadResult() for _ in range(clients)]
    ready = threading.Barrier(clients + 1)
    go = threading.Event()
    deadline = [0.0]

    def client(index: int) -> None:
        one = request_for(index)
        budget = per_client[index] if per_client is not None else None
        out = results[index]
        with requests.Session() as http:
            ready.wait()
            go.wait()
            done = 0
            while (budget is None and time.perf_counter() < deadline[0]) or (
                budget is not None and done < budget
            ):
                try:
                    elapsed_ms, problem = one(http)
                except (requests.RequestException, ValueError) as exc:
                    elapsed_ms, problem = 0.0, f"{type(exc).__name__}: {exc}"
                done += 1
                if problem is None:
                    out.latencies_ms.append(elapsed_ms)
                else:
                    out.errors.append(problem)

    threads = [
        threading.Thread(target=client, args=(i,), name=f"{name}-{i}", daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    deadline[0] = started + (seconds or 0.0)
    go.set()
    for thread in threads:
        thread.join()
    total = LoadResult(elapsed_s=time.perf_counter() - started)
    for result in results:
        total.add(result)
    return total


def run_main(bench: str, main: Callable[[], int]) -> None:
    """Run a bench's ``main``; Ctrl-C or SIGTERM (from run_all) stops its servers and exits 130."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{bench}: interrupted (servers stopped)", file=sys.stderr)
        sys.exit(130)

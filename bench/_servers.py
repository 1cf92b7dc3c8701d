"""The servers a bench starts as subprocesses: ``iris serve`` (as itself or as a sub-agent) and
the baseline, a bare WSGI echo app under the same gunicorn setup.

Each server's output goes to a log file inside the bench's temporary directory (quoted when it
fails); the API token is passed through the environment, never on the command line. Every server
runs in its own session, so a stuck one can be killed with its workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
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


class SubAgent(NamedTuple):
    """A started sub-agent: its API server (``/health`` lives there), its bridge URL and its
    data dir."""

    server: Server
    bridge_url: str
    data_dir: Path


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


def clean_env() -> dict[str, str]:
    """This process's environment without what would configure an ``iris`` started from it."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_IRIS_ENV_PREFIXES) and key not in _IRIS_ENV_NAMES
    }


def write_script(path: Path, rules: list[dict[str, object]]) -> Path:
    """Write a ``scripted``-provider script (``{"rules": [...]}``) and return its path."""
    path.write_text(json.dumps({"rules": rules}), encoding="utf-8")
    return path


@contextlib.contextmanager
def temp_workdir(prefix: str = "iris-bench-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- starting and stopping --------------------------------------------------------------------


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


def _iris_env(data_dir: Path, port: int, token: str, extra: dict[str, str]) -> dict[str, str]:
    env = clean_env()
    env.update(
        {
            "IRIS_DATA_DIR": str(data_dir),
            "IRIS_API_HOST": HOST,
            "IRIS_API_PORT": str(port),
            "IRIS_API_TOKEN": token,
            "IRIS_PROVIDER": "offline",
        }
    )
    env.update(extra)
    return env


def start_iris(workdir: Path, *, extra_env: dict[str, str] | None = None) -> Server:
    """Start ``iris serve`` with a fresh data dir under ``workdir``; does not wait for health."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="iris-data-", dir=workdir))
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = _iris_env(data_dir, port, token, extra_env or {})
    process = _popen([script("iris"), "serve"], env, data_dir / "serve.log", workdir)
    return Server(process, f"http://{HOST}:{port}", token)


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
    agent = {"AGENT_NAME": name, "BRIDGE_PORT": str(bridge_port)}
    env = _iris_env(data_dir, api_port, token, {**agent, **(extra_env or {})})
    log_path = workdir / f"serve-{name}-{api_port}.log"
    process = _popen([script("iris"), "serve"], env, log_path, workdir)
    server = Server(process, f"http://{HOST}:{api_port}", token)
    return SubAgent(server, f"http://{HOST}:{bridge_port}", data_dir)


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
    process = _popen(argv, clean_env(), app_dir / "gunicorn.log", app_dir)
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


# --- started, healthy, stopped ----------------------------------------------------------------


@contextlib.contextmanager
def serving(server: Server, what: str, timeout: float = 60.0) -> Iterator[Server]:
    """Wait until a started ``server`` is healthy, yield it and stop it on exit. A server that
    does not come up, or a failure while it serves, is reported with the end of its log."""
    try:
        try:
            wait_healthy(server.base_url, server.process, timeout=timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{what}: {exc}\n{log_tail(server.process)}") from None
        try:
            yield server
        except Exception:
            print(f"{what} log:\n{log_tail(server.process)}", file=sys.stderr)
            raise
    finally:
        stop_process(server.process)


@contextlib.contextmanager
def running_iris(
    workdir: Path, *, extra_env: dict[str, str] | None = None, timeout: float = 60.0
) -> Iterator[Server]:
    """:func:`start_iris`, healthy, stopped on exit (see :func:`serving`)."""
    with serving(start_iris(workdir, extra_env=extra_env), "iris", timeout) as server:
        yield server


@contextlib.contextmanager
def running(kind: str, workdir: Path, timeout: float = 60.0) -> Iterator[Server]:
    """``kind`` ("iris" or "echo") started under ``workdir``, healthy, stopped on exit."""
    server = start_iris(workdir) if kind == "iris" else start_echo(workdir)
    with serving(server, kind, timeout):
        yield server


@contextlib.contextmanager
def running_subagent(
    workdir: Path,
    *,
    data_dir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> Iterator[SubAgent]:
    """:func:`start_subagent`, healthy, stopped on exit (see :func:`serving`)."""
    agent = start_subagent(workdir, data_dir=data_dir, extra_env=extra_env)
    with serving(agent.server, "sub-agent", timeout):
        yield agent


def anthropic_env(base_url: str, api_key: str, model: str) -> dict[str, str]:
    """What points ``iris serve`` at a wire-level fake of the Anthropic API (``anthropic``
    provider, the official SDK)."""
    return {
        "IRIS_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_BASE_URL": base_url,
        "IRIS_MODEL": model,
    }

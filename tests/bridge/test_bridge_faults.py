"""Bridge failure modes, with real processes only: dropped streams, killed and restarted agents,
a restarted Iris, old-style agents and unreachable ones."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.bridge.client import BridgeCall, BridgeError, call_agent_bridge
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.bridge.conftest import NDJSON, SubAgent, register

StartSubAgent = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


class Background:
    """Run one call on a thread, keeping what it returned (``value``) or raised (``error``)."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._target = target
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self._target()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"background call still running after {timeout}s"


# -- a TCP proxy that cuts the first connection --------------------------------------------------


class CuttingProxy:
    """Forwards TCP to ``upstream``; the FIRST connection is closed (both sides) right after the
    response bytes carrying the first ``status`` line have been forwarded. Later connections (the
    client's polls of the job log) pass through untouched."""

    MARKER = b'"type":"status"'

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self.cut = threading.Event()
        self.forwarded_before_cut = b""
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._spawn(self._accept_loop)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                first = self.connections == 1
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, False)
            self._spawn(self._pump, upstream, client, first)

    def _pump(self, source: socket.socket, target: socket.socket, cut_after_status: bool) -> None:
        buffered = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if not cut_after_status:
                    target.sendall(data)
                    continue
                buffered += data
                at = buffered.find(self.MARKER)
                # The JSON line ends with "\n"; the chunk that carries it with "\r\n".
                end = buffered.find(b"\n\r\n", at) if at >= 0 else -1
                if end < 0:
                    target.sendall(data)
                    continue
                keep = end + 3 - (len(buffered) - len(data))
                target.sendall(data[:keep])
                self.forwarded_before_cut = buffered[: end + 3]
                self.cut.set()
                break
        except OSError:
            pass
        finally:
            for sock in (source, target):
                _close(sock)

    def close(self) -> None:
        self._closed.set()
        _close(self.listener)
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            _close(sock)
        for thread in threads:
            thread.join(5)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.fixture
def cutting_proxy() -> Iterator[Callable[[int], CuttingProxy]]:
    proxies: list[CuttingProxy] = []

    def start(upstream_port: int) -> CuttingProxy:
        proxies.append(CuttingProxy(upstream_port))
        return proxies[-1]

    yield start
    for proxy in proxies:
        proxy.close()


# -- an old-style sub-agent ----------------------------------------------------------------------


class OldAgent(ThreadingHTTPServer):
    """A sub-agent from before the stream: it records what it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), OldAgentHandler)
        self.received: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class OldAgentHandler(BaseHTTPRequestHandler):
    """Ignores Accept: every POST /bridge gets one JSON body."""

    server: OldAgent

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/bridge":
            self.send_error(404)
            return
        self.server.received.append({"body": body, "accept": self.headers.get("Accept")})
        payload = json.dumps({"text": "old reply"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def old_agent() -> Iterator[OldAgent]:
    server = OldAgent()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


# -- helpers -------------------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc/*/stat (field 4 is the parent pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def kill_hard(server: IrisServer) -> None:
    """SIGKILL the gunicorn master and its worker(s), leaving nothing to finish gracefully.

    The master goes first: killed after its worker, it could fork a replacement in between, and
    that orphan would keep serving the ports."""
    assert server.process is not None
    master = server.process.pid
    workers = children_of(master)
    assert workers, "gunicorn has no worker to kill"
    os.kill(master, signal.SIGKILL)
    server.process.wait(10)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in workers:  # reparented, then reaped: gone once /proc forgets it or it is a zombie
        wait_for(functools.partial(_gone, pid), 10, f"worker {pid} to die")
    ports = [server.port]
    if "BRIDGE_PORT" in server.env:
        ports.append(int(server.env["BRIDGE_PORT"]))
    for port in ports:  # no orphan still holds them
        wait_for(functools.partial(_bindable, port), 10, f"port {port} to be free")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def log_entries(server: IrisServer, session: str) -> list[dict[str, Any]]:
    path = server.data_dir / f"SESSION-{session}" / "log.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line still being written
    return entries


# -- 1. a dropped stream is recovered from the job log -------------------------------------------


def test_mid_stream_drop_is_recovered_from_the_job_log(
    start_subagent: StartSubAgent, cutting_proxy: Callable[[int], CuttingProxy]
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "dig",
                "turns": [
                    [
                        {"thinking": "let me look"},
                        {"tool": "bash", "args": {"command": "sleep 1; echo step"}},
                    ],
                    [{"text": "the answer"}],
                ],
            }
        ]
    )
    proxy = cutting_proxy(sub.bridge_port)
    statuses: list[str] = []

    reply = call_agent_bridge(
        BridgeCall(
            bridge_url=proxy.url,
            text="dig into it",
            idle_timeout=20,
            on_status=statuses.append,
            agent="helper",
        )
    )

    assert reply.text == "the answer"
    assert reply.status == "done"
    assert statuses and any("bash" in s for s in statuses), statuses
    # The first connection really was cut after the status line, before the reply...
    assert proxy.cut.is_set()
    assert b'"type":"status"' in proxy.forwarded_before_cut
    assert b'"type":"final"' not in proxy.forwarded_before_cut
    # ...and the reply came through later connections: polls of the job log.
    assert proxy.connections >= 2
    job = requests.get(f"{sub.bridge_url}/bridge/jobs/{reply.request_id}", timeout=10).json()
    assert job["done"] is True
    assert job["events"][-1]["type"] == "final" and job["events"][-1]["text"] == "the answer"


# -- 2. kill -9 of the sub-agent mid-run ----------------------------------------------------------


def test_killed_subagent_gives_a_prompt_error_naming_the_request(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "long job",
                "turns": [
                    [{"tool": "bash", "args": {"command": "true"}}],
                    [{"thinking": "taking my time"}, {"sleep": 120}, {"text": "never"}],
                ],
            }
        ]
    )
    request_id = f"req-kill-{uuid.uuid4().hex[:12]}"
    first_status = threading.Event()
    statuses: list[str] = []

    def on_status(text: str) -> None:
        statuses.append(text)
        first_status.set()

    gave_up = threading.Event()

    def killer() -> None:
        try:
            first_status.wait(15)
            time.sleep(0.3)  # let the run move on into its long sleep
            kill_hard(sub.server)
        finally:
            if sub.server.process is not None and sub.server.process.poll() is None:
                gave_up.set()  # the kill failed: make the call return instead of hanging

    assassin = Background(killer)
    started = time.monotonic()
    error: BridgeError | None = None
    try:
        call_agent_bridge(
            BridgeCall(
                bridge_url=sub.bridge_url,
                text="long job please",
                request_id=request_id,
                idle_timeout=3,
                on_status=on_status,
                abort=gave_up,
                agent="helper",
            )
        )
    except BridgeError as exc:
        error = exc
    elapsed = time.monotonic() - started
    assassin.join(30)
    assert assassin.error is None, repr(assassin.error)
    assert not gave_up.is_set()

    assert error is not None, "the call returned instead of raising BridgeError"
    assert elapsed < 15, f"took {elapsed:.1f}s to give up"
    assert statuses, "no status line before the kill"
    assert request_id in error.message
    assert f"iris bridge recover helper {request_id}" in error.message
    assert "no progress for 3s" in error.message
    assert error.code == "bridge_timeout"
    assert error.request_id == request_id


# -- 3. Iris restarted mid-request; the reply is fetched by hand ----------------------------------


def test_reply_survives_an_iris_restart_via_bridge_recover(
    start_subagent: StartSubAgent, start_iris: StartIris
) -> None:
    sub = start_subagent(
        rules=[
            {
                "when": "slow job",
                "turns": [[{"thinking": "working"}, {"sleep": 4}, {"text": "late answer"}]],
            }
        ]
    )
    iris = start_iris()
    register(iris, "helper", sub.bridge_url)

    pending = Background(
        lambda: iris.post(
            "/sessions/r1/message", json_body={"text": "@helper slow job"}, timeout=60
        )
    )
    marker = wait_for(
        lambda: next((e for e in log_entries(iris, "r1") if e.get("type") == "bridge_call"), None),
        20,
        "the bridge_call marker in SESSION-r1/log.jsonl",
    )
    assert marker["agent"] == "helper"
    request_id = marker["requestId"]

    iris.restart()
    pending.join(60)  # it failed or returned; it must not hang

    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    deadline = time.monotonic() + 30
    attempts = []
    while True:
        done = run_iris("bridge", "recover", "helper", request_id, env=env, timeout=60)
        attempts.append(done.returncode)
        if done.returncode != 2 or time.monotonic() > deadline:
            break
        assert "still running" in done.stderr
        time.sleep(0.5)
    assert done.returncode == 0, (attempts, done.stdout, done.stderr)
    assert "late answer" in done.stdout


# -- 4. an old-style sub-agent that ignores Accept ------------------------------------------------


def test_old_style_agent_json_reply_direct_and_through_iris(
    old_agent: OldAgent, start_iris: StartIris
) -> None:
    url = old_agent.url
    reply = call_agent_bridge(BridgeCall(bridge_url=url, text="hello", idle_timeout=10))
    assert reply.text == "old reply"
    assert reply.status == "done"
    first = old_agent.received[0]
    assert first["accept"] == NDJSON  # the client asked for the stream and coped without it
    assert first["body"]["text"] == "hello" and first["body"]["requestId"] == reply.request_id

    iris = start_iris()
    register(iris, "oldie", url)
    answer = iris.post("/sessions/o1/message", json_body={"text": "@oldie hi"}, timeout=30)
    assert answer.status == 200, answer.body
    body = answer.json()
    assert body["text"] == "old reply"
    assert body["status"] == "done"
    assert len(old_agent.received) == 2
    assert old_agent.received[-1]["body"]["text"] == "hi"


# -- 5. an unreachable agent -----------------------------------------------------------------------


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port that refuses connections: bound (so nobody else can listen on it), never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def test_unreachable_agent_fails_promptly_with_route_failed(
    start_iris: StartIris, dead_port: int
) -> None:
    iris = start_iris()
    register(iris, "ghost", f"http://127.0.0.1:{dead_port}")

    started = time.monotonic()
    answer = iris.post("/sessions/g1/message", json_body={"text": "@ghost hi"}, timeout=30)
    elapsed = time.monotonic() - started

    assert elapsed < 10, f"took {elapsed:.1f}s"
    # A failed route is a failed run: HTTP 502, code route_failed, and the run's payload.
    assert answer.status == 502, answer.body
    body = answer.json()
    assert body["code"] == "route_failed"
    assert body["status"] == "failed"
    assert body["error"].startswith(f"ghost is unreachable at http://127.0.0.1:{dead_port}: ")
    assert body["text"] == f"(ghost failed: {body['error']})"
    assert body["runId"]
    # The conversation keeps the attempt: the marker (written before the call) and the failure.
    entries = iris.get("/sessions/g1/history").json()["entries"]
    kinds = [(e["type"], e.get("role")) for e in entries]
    assert kinds == [("message", "user"), ("bridge_call", None), ("message", "assistant")]
    assert entries[1]["agent"] == "ghost"
    assert entries[2]["status"] == "failed" and entries[2]["text"] == body["text"]


# -- 6. a restarted sub-agent marks unfinished jobs as interrupted ---------------------------------


def start_forever_job(sub: SubAgent) -> tuple[requests.Response, str]:
    """A streamed request whose run sleeps for two minutes; its response and request id."""
    response = requests.post(
        f"{sub.bridge_url}/bridge",
        json={"text": "work forever"},
        headers={"Accept": NDJSON},
        stream=True,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    first = json.loads(next(response.iter_lines()))
    assert first["type"] == "accepted"
    request_id = str(first["requestId"])
    job_log = sub.server.data_dir / "bridge-jobs" / f"{request_id}.jsonl"
    assert job_log.exists()  # logged before the stream began
    return response, request_id


FOREVER = [{"when": "forever", "turns": [[{"thinking": "hmm"}, {"sleep": 120}]]}]


def test_crashed_subagent_marks_unfinished_jobs_interrupted_on_restart(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(rules=FOREVER)
    response, request_id = start_forever_job(sub)
    try:
        kill_hard(sub.server)  # nothing gets to close the job log
    finally:
        response.close()
    job_log = sub.server.data_dir / "bridge-jobs" / f"{request_id}.jsonl"
    assert '"interrupted"' not in job_log.read_text()

    sub.server.start()
    job_url = f"{sub.bridge_url}/bridge/jobs/{request_id}?since=0"

    def finished() -> dict[str, Any] | None:
        job = requests.get(job_url, timeout=10)
        assert job.status_code == 200, job.text
        body: dict[str, Any] = job.json()
        return body if body["done"] else None

    # The restart check runs in the background, so the log is closed shortly after startup.
    body = wait_for(finished, 20, f"job {request_id} to be marked interrupted")
    assert [e["type"] for e in body["events"]] == ["error"], body
    last = body["events"][-1]
    assert last["code"] == "interrupted"
    assert last["requestId"] == request_id
    assert last["seq"] == 1


def test_gracefully_restarted_subagent_ends_unfinished_jobs_with_shutting_down(
    start_subagent: StartSubAgent,
) -> None:
    sub = start_subagent(rules=FOREVER)
    response, request_id = start_forever_job(sub)
    try:
        sub.server.restart()  # SIGTERM: the run is cut short, and the log says so
    finally:
        response.close()

    job = requests.get(f"{sub.bridge_url}/bridge/jobs/{request_id}?since=0", timeout=10)
    assert job.status_code == 200, job.text
    body = job.json()
    assert body["done"] is True, body
    assert [e["type"] for e in body["events"]] == ["error"], body
    last = body["events"][-1]
    assert last["code"] == "shutting_down", body  # not a quiet "final" with status "stopped"
    assert last["requestId"] == request_id

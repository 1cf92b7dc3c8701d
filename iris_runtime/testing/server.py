"""A real ``iris serve`` (gunicorn) on free loopback ports, for tests and benchmarks."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris_runtime.testing.polling import poll

STARTUP_TIMEOUT = 20.0


OWN_VARIABLES = ("IRIS_", "BRIDGE_PORT", "AGENT_NAME")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any Iris setting, plus ``extra``: a child Iris then
    sees only what the test gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OWN_VARIABLES)}
    env.update(extra)
    return env


def run_iris(
    *args: str, env: dict[str, str], timeout: float = 120.0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one ``iris`` subcommand to completion, capturing its output; ``stdin`` is its input
    (for secrets such as ``--token-stdin``, which must never be in argv)."""
    return subprocess.run(
        [sys.executable, "-m", "iris_runtime", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class HttpReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class IrisServer:
    """One Iris process. ``start()`` returns once ``/health`` answers; ``stop()`` sends SIGTERM."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # An API off loopback (another host's agents reach it) speaks TLS: its address, and the CA
    # that signed its IRIS_TLS_CERT (set in ``env``), for this side's requests.
    host: str = "127.0.0.1"
    cafile: str | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.cafile else 'http'}://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "iris_runtime", "serve"]

    def environment(self) -> dict[str, str]:
        env = clean_environment(
            IRIS_DATA_DIR=str(self.data_dir),
            IRIS_API_PORT=str(self.port),
            IRIS_API_TOKEN=self.token,
            IRIS_SSE_HEARTBEAT_SECONDS="0.5",
            IRIS_API_HOST=self.host,
        )
        env.update(self.env)
        return env

    def start(self, timeout: float = STARTUP_TIMEOUT) -> IrisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"iris-{self.port}.log"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        process = self.process

        def healthy() -> bool:
            if process.poll() is not None:
                raise RuntimeError(
                    f"iris serve exited with {process.returncode}:\n{self.log_tail()}"
                )
            return self.get("/health", auth=False).status == 200

        if poll(healthy, timeout, ignoring=(OSError,)):
            return self
        self.stop()
        raise RuntimeError(f"iris serve not healthy after {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def restart(self) -> IrisServer:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- HTTP ---------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        timeout: float = 60.0,
    ) -> HttpReply:
        all_headers = dict(headers or {})
        if auth:
            all_headers.setdefault("Authorization", f"Bearer {self.token}")
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(  # noqa: S310 (always our own loopback http URL)
            self.url + path, data=body, method=method, headers=all_headers
        )
        context = ssl.create_default_context(cafile=self.cafile) if self.cafile else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as response:  # noqa: S310
                return HttpReply(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return HttpReply(error.code, dict(error.headers), error.read())

    def get(self, path: str, **kwargs: Any) -> HttpReply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> HttpReply:
        return self.request("POST", path, **kwargs)

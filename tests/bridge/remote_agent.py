"""A sub-agent on "another host": ``iris serve`` inside a network namespace, its bridge bound to
the namespace's address (TLS unless told otherwise), its API port on that host's loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from iris_runtime.testing.netns import NetNamespace
from iris_runtime.testing.server import clean_environment

STARTUP_SECONDS = 60.0


@dataclass
class RemoteAgent:
    name: str
    netns: NetNamespace
    folder: Path
    port: int
    token: str = field(repr=False)
    tls: tuple[Path, Path] | None = None  # certificate chain, key
    cacert: Path | None = None  # to check readiness over TLS
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def bridge_url(self) -> str:
        return f"{self.scheme}://{self.netns.addr}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.folder / f"{self.name}-data"

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    def rules(self, rules: list[dict[str, Any]]) -> None:
        (self.folder / f"{self.name}-script.json").write_text(json.dumps({"rules": rules}))

    def start(self) -> RemoteAgent:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        script = self.folder / f"{self.name}-script.json"
        if not script.exists():
            self.rules([])
        env = clean_environment(
            IRIS_DATA_DIR=str(self.data_dir),
            AGENT_NAME=self.name,
            BRIDGE_PORT=str(self.port),
            IRIS_BRIDGE_HOST=self.netns.addr,
            IRIS_API_TOKEN=self.token,
            IRIS_PROVIDER="scripted",
            IRIS_SCRIPT_FILE=str(script),
            **self.extra_env,
        )
        if self.tls:
            env.update(IRIS_TLS_CERT=str(self.tls[0]), IRIS_TLS_KEY=str(self.tls[1]))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.netns.command(sys.executable, "-m", "iris_runtime", "serve"),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        """The bridge answers a lookup of a job that cannot exist with 404 unknown_job."""
        try:
            reply = requests.get(
                f"{self.bridge_url}/bridge/jobs/none",
                headers={"Authorization": f"Bearer {self.token}"},
                verify=str(self.cacert) if self.cacert else True,
                timeout=2,
            )
        except requests.RequestException:
            return False
        return reply.status_code == 404

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # ip netns exec execs: this is iris itself
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

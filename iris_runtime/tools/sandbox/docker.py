"""The ``docker:<container>`` level: commands run with ``docker exec`` in a long-lived container
the operator names and starts.

The container must be running when Iris starts and must show the work folder at ``/workspace``
(``-v <data dir>/work:/workspace``); the agent's identity files may be mounted read-only under
``/agent`` (``-v <data dir>/MEMORY.md:/agent/MEMORY.md:ro``), and the file tools see those too.
Commands run as uid 10000 in ``/workspace``; paths are translated both ways (the file tools and
``attach`` take ``/workspace/...``). Variables reach the command as ``-e NAME`` with the value in
the docker client's environment, never on its command line.

Killing ``docker exec`` does not kill what it started in the container, so every run carries a
marker variable and a kill finds its processes by it, inside the container.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import (
    INSIDE_AGENT,
    INSIDE_WORKSPACE,
    SANDBOX_UID,
    Launch,
    Mount,
    SandboxSpec,
    SandboxUnavailable,
    WorkspaceView,
)
from iris_runtime.tools.sandbox.view import ensure_work_folder, prompt_section, work_folder

RUN_MARKER = "IRIS_RUN_ID"
# Runs as the commands' uid in the container: kill every process whose environment carries the
# run's marker.
_KILL_SCRIPT = (
    'for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}; [ "$p" = "$$" ] && '
    'continue; tr "\\0" "\\n" < "$e" 2>/dev/null | grep -qx "$0" && kill -9 "$p"; done; true'
)
_INSPECT_SECONDS = 30.0


class DockerSandbox:
    isolated = True
    # The uid its commands write as on the host: the file tools hand what they make to it.
    command_uid = SANDBOX_UID
    isolates_network = False  # the operator's container decides its network

    def __init__(self, spec: SandboxSpec, docker: str | None) -> None:
        if not spec.option:
            raise SandboxUnavailable("the docker level names its container: docker:<container>")
        self.level = spec.configured
        self.run_secrets = spec.run_secrets
        self.container = spec.option
        self._docker = docker
        self._client_env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
        self._work = work_folder(spec.data_dir)
        self.view = WorkspaceView(Mount(self._work, INSIDE_WORKSPACE, writable=True))

    def prompt_section(self) -> str:
        return prompt_section(self.level, self.view)

    def check(self) -> None:
        ensure_work_folder(self.view, SANDBOX_UID)
        if self._docker is None:
            raise SandboxUnavailable("the docker level needs the docker client on PATH")
        info = self._inspect()
        if not info.get("State", {}).get("Running"):
            raise SandboxUnavailable(f"container {self.container!r} is not running")
        self.view = self._view_of(info.get("Mounts") or [])

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        assert self._docker is not None
        run_id = uuid.uuid4().hex
        names = [*env, RUN_MARKER]
        command = [self._docker, "exec", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}", "-w", cwd]
        for name in names:
            command += ["-e", name]  # the value comes from the client's environment
        return Launch(
            [*command, self.container, *argv],
            self._work,
            {**env, RUN_MARKER: run_id, **self._client_env},
            kill=lambda: self._kill(run_id),
        )

    def _inspect(self) -> dict[str, Any]:
        assert self._docker is not None
        try:
            done = self._client("inspect", "--type", "container", self.container)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"docker inspect {self.container}: {exc}") from None
        if done.returncode != 0:
            reason = done.stderr.strip() or f"exit {done.returncode}"
            raise SandboxUnavailable(f"container {self.container!r}: {reason}")
        found = json.loads(done.stdout)
        return found[0] if isinstance(found, list) and found else {}

    def _view_of(self, mounts: list[dict[str, Any]]) -> WorkspaceView:
        by_destination = {m.get("Destination"): Path(str(m.get("Source"))) for m in mounts}
        source = by_destination.get(INSIDE_WORKSPACE)
        if source is None or source.resolve() != self._work.resolve():
            raise SandboxUnavailable(
                f"container {self.container!r} must show the work folder at {INSIDE_WORKSPACE}: "
                f"start it with -v {self._work}:{INSIDE_WORKSPACE}"
            )
        extras = tuple(
            Mount(host, str(dest), writable=False)
            for dest, host in by_destination.items()
            if isinstance(dest, str) and dest.startswith(INSIDE_AGENT + "/")
        )
        return WorkspaceView(Mount(self._work, INSIDE_WORKSPACE, writable=True), extras)

    def _kill(self, run_id: str) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self._client(
                "exec",
                "--user",  # the commands' own uid: root here lacks CAP_SYS_PTRACE for environ
                f"{SANDBOX_UID}:{SANDBOX_UID}",
                self.container,
                "sh",
                "-c",
                _KILL_SCRIPT,
                f"{RUN_MARKER}={run_id}",
            )

    def _client(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self._docker is not None
        return subprocess.run(
            [self._docker, *args],
            capture_output=True,
            text=True,
            timeout=_INSPECT_SECONDS,
            env={**os.environ, **self._client_env},
            check=False,
        )


def open_docker(spec: SandboxSpec) -> DockerSandbox:
    return DockerSandbox(spec, shutil.which("docker"))

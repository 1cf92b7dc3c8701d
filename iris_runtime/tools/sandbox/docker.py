"""The ``docker:<container>`` level: commands run with ``docker exec`` in a long-lived container
the operator names and starts.

The container must be running when Iris starts and must show the work folder at ``/workspace``
(``-v <data dir>/work:/workspace``); the agent's identity files may be mounted read-only under
``/agent`` (``-v <data dir>/MEMORY.md:/agent/MEMORY.md:ro``), and the file tools see those too.
Commands run as uid 10000 in ``/workspace``; paths are translated both ways (the file tools and
``attach`` take ``/workspace/...``). Variables reach the command as ``-e NAME`` with the value in
the docker client's environment, never on its command line. The client itself runs with Iris's
own ``HOME`` and Docker settings. A container whose configuration hands commands the host
(``docker_container``) is refused.

Commands go to the container by the id Iris checked, so a container re-created under the same
name gets none. Killing ``docker exec`` does not kill what it started in the container, so every
run carries a marker variable: a kill (timeout, Stop) finds its processes by it, inside the
container, and so does the end of every run, for what it left in the background. Once no
command of this Iris runs (``docker_runs``), every process of the commands' uid in the container
is killed, so a command that dropped the marker does not outlive the quiet either.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import (
    INSIDE_WORKSPACE,
    SANDBOX_UID,
    Launch,
    Mount,
    SandboxSpec,
    SandboxUnavailable,
    WorkspaceView,
)
from iris_runtime.tools.sandbox.docker_container import (
    allowed_binds,
    engine_sockets,
    refusals,
    view_of,
)
from iris_runtime.tools.sandbox.docker_runs import RunGate
from iris_runtime.tools.sandbox.view import ensure_work_folder, prompt_section, work_folder

log = logging.getLogger(__name__)

RUN_MARKER = "IRIS_RUN_ID"
# Variables the docker client reads itself: the command's values go on the command line (they are
# never secret), so the client keeps Iris's own.
CLIENT_OWN = frozenset({"PATH", "HOME"})
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
        self._data_dir = spec.data_dir
        self._extra_binds = allowed_binds(spec.env)
        self._client_env = client_environment(os.environ)
        self._work = work_folder(spec.data_dir)
        self.view = WorkspaceView(Mount(self._work, INSIDE_WORKSPACE, writable=True))
        # Set by check(): commands go to the container Iris checked, by its id, so one
        # re-created under the same name gets none of them.
        self._id: str | None = None
        self._gate: RunGate | None = None

    def prompt_section(self) -> str:
        return prompt_section(self.level, self.view)

    def check(self) -> None:
        ensure_work_folder(self.view, SANDBOX_UID)
        if self._docker is None:
            raise SandboxUnavailable("the docker level needs the docker client on PATH")
        info = self._inspect("container", self.container)
        sockets = engine_sockets(self._client_env)
        found = refusals(info, self._data_dir, self._extra_binds, self._volume, sockets)
        if found:
            raise SandboxUnavailable(
                f"container {self.container!r} would hand commands the host: {'; '.join(found)}"
            )
        if not info.get("State", {}).get("Running"):
            raise SandboxUnavailable(f"container {self.container!r} is not running")
        try:
            self.view = view_of(info, self.container, self._work)
        except ValueError as exc:
            raise SandboxUnavailable(str(exc)) from None
        self._id = str(info.get("Id") or self.container)
        self._gate = RunGate(self._data_dir, self._id)

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        assert self._docker is not None and self._id is not None and self._gate is not None
        run_id = uuid.uuid4().hex
        command = [self._docker, "exec", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}", "-w", cwd]
        forwarded: dict[str, str] = {}
        for name, value in {**env, RUN_MARKER: run_id}.items():
            if name.startswith("DOCKER_"):
                continue  # the client's own settings are Iris's, never the command's
            if name in CLIENT_OWN:
                command += ["-e", f"{name}={value}"]  # the client reads its own (never secret)
            else:
                command += ["-e", name]  # the value comes from the client's environment
                forwarded[name] = value
        entered = self._gate.enter()
        gate = self._gate
        return Launch(
            [*command, self._id, *argv],
            self._work,
            {**forwarded, **self._client_env},
            kill=lambda: self._kill(f"{RUN_MARKER}={run_id}"),
            cleanup=lambda: self._finished(run_id, gate, entered),
        )

    def _finished(self, run_id: str, gate: RunGate, entered: int) -> None:
        """What a command left running in the background goes with it: its marked processes,
        and, once no command of this Iris runs, every process of the commands' uid (a command
        can drop the marker by exec-ing with a fresh environment)."""
        # One docker exec either way: the sweep reaches the run's marked processes too.
        gate.leave(entered, self._kill_all, lambda: self._kill(f"{RUN_MARKER}={run_id}"))

    def _inspect(self, kind: str, name: str) -> dict[str, Any]:
        assert self._docker is not None
        try:
            done = self._client("inspect", "--type", kind, name)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"docker inspect {name}: {exc}") from None
        if done.returncode != 0:
            reason = done.stderr.strip() or f"exit {done.returncode}"
            raise SandboxUnavailable(f"{kind} {name!r}: {reason}")
        found = json.loads(done.stdout)
        return found[0] if isinstance(found, list) and found else {}

    def _volume(self, name: str) -> dict[str, Any]:
        return self._inspect("volume", name)

    def _kill(self, marker: str) -> None:
        # The commands' own uid: root here lacks CAP_SYS_PTRACE for another uid's environ.
        self._exec_quietly("the kill of a run's processes", "sh", "-c", _KILL_SCRIPT, marker)

    def _kill_all(self) -> None:
        # kill -1 as uid 10000 reaches exactly the processes of that uid, never the container's
        # own (another uid: check() refuses a container whose user is 10000) or the caller.
        self._exec_quietly("the sweep of uid 10000", "sh", "-c", "kill -9 -1 2>/dev/null; true")

    def _exec_quietly(self, what: str, *argv: str) -> None:
        assert self._id is not None
        try:
            done = self._client("exec", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}", self._id, *argv)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("docker:%s: %s failed: %s", self.container, what, exc)
            return
        if done.returncode != 0:
            log.warning(
                "docker:%s: %s failed (exit %s): %s",
                self.container,
                what,
                done.returncode,
                done.stderr.strip()[-300:],
            )

    def _client(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self._docker is not None
        return subprocess.run(
            [self._docker, *args],
            capture_output=True,
            text=True,
            timeout=_INSPECT_SECONDS,
            env=self._client_env,
            check=False,
        )


# Beyond PATH, HOME and DOCKER_*, what the docker client itself may need to reach the engine
# (ssh:// endpoints, proxies).
_CLIENT_PASSTHROUGH = ("SSH_AUTH_SOCK", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def client_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The docker client's own environment: Iris's PATH, HOME and Docker settings, so it reads
    Iris's client configuration (credential helpers run programs) and never one under the
    command's HOME."""
    env = {k: v for k, v in environ.items() if k.startswith("DOCKER_")}
    env |= {k: environ[k] for k in _CLIENT_PASSTHROUGH if k in environ}
    env["PATH"] = environ.get("PATH", "/usr/bin:/bin")
    home = environ.get("HOME") or str(Path.home())
    env["HOME"] = home
    env.setdefault("DOCKER_CONFIG", str(Path(home) / ".docker"))
    return env


def open_docker(spec: SandboxSpec) -> DockerSandbox:
    return DockerSandbox(spec, shutil.which("docker"))

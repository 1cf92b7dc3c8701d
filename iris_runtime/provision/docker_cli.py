"""The docker CLI, for what Terraform does not tell: whether the daemon answers, what containers
there are and what image they run, removing or starting one.

They give clear errors before Terraform runs, and let tests and ``remove`` look at what is
really there. ``DOCKER_HOST`` is honoured by the docker CLI itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from iris_runtime.errors import ProvisionError

DOCKER_BIN = "docker"
CONTAINER_PREFIX = "iris-agent-"
AGENT_LABEL = "iris.agent"


def container_name(agent: str) -> str:
    return f"{CONTAINER_PREFIX}{agent}"


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    binary = shutil.which(DOCKER_BIN)
    if binary is None:
        raise ProvisionError(
            "docker CLI not found: install Docker (Debian: apt-get install docker.io) to run "
            "Docker-mode agents"
        )
    try:
        return subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"docker {args[0]} did not answer within {timeout:.0f} s") from None


def _daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "the default socket /var/run/docker.sock"


def check_docker() -> str:
    """The daemon's version; ProvisionError when the CLI is missing or the daemon unreachable."""
    result = _docker("version", "--format", "{{.Server.Version}}", timeout=20)
    if result.returncode != 0 or not result.stdout.strip():
        reason = _last_line(result.stderr) or f"exit status {result.returncode}"
        raise ProvisionError(
            f"Docker daemon not reachable at {_daemon_address()}: {reason} (is dockerd "
            "running, and may this user use its socket? DOCKER_HOST selects another daemon)"
        )
    return result.stdout.strip()


def inspect_container(name: str) -> dict[str, Any] | None:
    """``docker container inspect`` of one container, or None when there is none."""
    result = _docker("container", "inspect", name)
    if result.returncode != 0:
        if "no such" in result.stderr.lower():
            return None
        raise ProvisionError(f"docker inspect {name} failed: {_last_line(result.stderr)}")
    found = json.loads(result.stdout)
    return found[0] if found else None


def container_state(name: str) -> str | None:
    """``running``, ``restarting``, ``exited``... or None when there is no such container."""
    info = inspect_container(name)
    return None if info is None else str(info.get("State", {}).get("Status", ""))


def remove_container(name: str) -> bool:
    """Force-remove a container; True when there was one (``rm --force`` alone cannot tell:
    current CLIs exit 0 for a missing container)."""
    if inspect_container(name) is None:
        return False
    result = _docker("rm", "--force", name)
    if result.returncode != 0 and "no such container" not in result.stderr.lower():
        raise ProvisionError(f"docker rm {name} failed: {_last_line(result.stderr)}")
    return True


def start_container(name: str) -> None:
    """``docker start`` a stopped container (a no-op for a running one)."""
    result = _docker("start", name)
    if result.returncode != 0:
        raise ProvisionError(f"docker start {name} failed: {_last_line(result.stderr)}")


def containers_on_other_images(image: str) -> list[str]:
    """Agents (``iris.agent`` label) whose container was started from the tag ``image`` but runs
    an older build of it: the tag has moved on since. Empty when Docker cannot tell."""
    current = _docker("image", "inspect", "--format", "{{.Id}}", image)
    listed = _docker("ps", "--all", "--filter", f"label={AGENT_LABEL}", "--format", "{{.Names}}")
    names = listed.stdout.split()
    if current.returncode != 0 or listed.returncode != 0 or not names:
        return []
    result = _docker(
        "container",
        "inspect",
        "--format",
        f'{{{{index .Config.Labels "{AGENT_LABEL}"}}}} {{{{.Config.Image}}}} {{{{.Image}}}}',
        *names,
    )
    older = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == image and parts[2] != current.stdout.strip():
            older.append(parts[0])
    return sorted(older)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""

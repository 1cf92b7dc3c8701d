"""What runs a spawned agent: systemd, Iris's own supervisor (process) or Docker; choosing one
for a request, the backend that drives it, and asking it how an agent is doing.

The backends are imported when asked for: a command that only lists agents loads none of them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from iris_runtime.agents.home import AgentRecord
from iris_runtime.agents.spawn_config import SpawnConfig, level_refusal
from iris_runtime.config import Settings
from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.provision.launch import AgentService, Progress

if TYPE_CHECKING:
    from iris_runtime.provision.docker import DockerAgents


def systemd_booted() -> bool:
    return Path("/run/systemd/system").is_dir()


def through_helper(settings: Settings) -> bool:
    """An unprivileged Iris on a host with the root-owned agent-unit helper (the
    iris_runtime role installs it): units are written by the helper."""
    from iris_runtime.provision.unit_requests import HELPER_VARIABLE

    return os.geteuid() != 0 and settings.env.get(HELPER_VARIABLE) == "1"


def choose_manager(mode: str, wanted: str, sandbox: str, progress: Progress) -> str:
    """The manager an agent of ``mode`` runs under, given the one asked for (``wanted``:
    auto, systemd or process); refuses a sandbox level it cannot run there."""
    manager = _manager(mode, wanted, progress)
    refusal = level_refusal(manager, sandbox)
    if refusal is not None:
        raise InvalidInput(refusal, code="sandbox_unavailable")
    return manager


def _manager(mode: str, wanted: str, progress: Progress) -> str:
    if mode == "docker":
        return "docker"
    if wanted not in ("auto", "systemd", "process"):
        raise InvalidInput(f"--service-manager must be systemd or process, not {wanted!r}")
    if wanted == "auto":
        if systemd_booted():
            return "systemd"
        progress(
            "systemd is not running here: Iris will supervise the agent as a child process, "
            "which does not hide Iris's files from it (use systemd or --mode docker for that)"
        )
        return "process"
    if wanted == "systemd" and not systemd_booted():
        raise ProvisionError(
            "--service-manager systemd: systemd is not running on this machine (no "
            "/run/systemd/system); use --service-manager process"
        )
    return wanted


def managers_to_check(record: AgentRecord | None) -> list[str]:
    """Where an agent may run: its record's manager; without a record (a hand-made home, an
    interrupted spawn), everywhere cheap to look."""
    if record is not None:
        return [record.manager]
    return ["systemd", "process"] if systemd_booted() else ["process"]


def service_for(manager: str, settings: Settings, config: SpawnConfig) -> AgentService:
    """The backend of a systemd or process agent."""
    if manager == "systemd" and through_helper(settings):
        from iris_runtime.provision.unit_requests import HelperSystemd

        return HelperSystemd(config.unit_dir)
    if manager == "systemd":
        from iris_runtime.provision.systemd import SystemdService

        return SystemdService(config.repo_dir, config.unit_dir, user=config.agent_user)
    from iris_runtime.provision.process_service import ProcessService

    return ProcessService(settings.data_dir)


def docker_agents(settings: Settings, config: SpawnConfig) -> DockerAgents:
    """The backend of Docker agents (Terraform in the checkout's ``terraform/``)."""
    from iris_runtime.provision.docker import DockerAgents
    from iris_runtime.provision.terraform import Terraform

    return DockerAgents(
        repo_dir=config.repo_dir,
        data_dir=settings.data_dir,
        image=config.docker_image,
        base_image=config.docker_base_image,
        terraform=Terraform(config.repo_dir / "terraform", binary=config.terraform_bin),
        env_file=settings.env_file,
        broker_url=config.broker_url,
    )


def agent_state(settings: Settings, name: str, manager: str) -> dict[str, object]:
    """How agent ``name`` runs under ``manager`` and whether it is up, as the manager says."""
    out: dict[str, object] = {"manager": manager, "state": "unknown"}
    if manager == "process":
        from iris_runtime.provision.process_service import ProcessService

        row = ProcessService(settings.data_dir).status(name)
        if row is not None:
            out.update(state=row.state, restarts=row.restarts)
    elif manager == "systemd":
        done = subprocess.run(
            ["systemctl", "is-active", f"iris-agent-{name}.service"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        out["state"] = done.stdout.strip() or "unknown"
    else:
        from iris_runtime.provision.docker_cli import container_name, container_state

        with contextlib.suppress(ProvisionError):
            out["state"] = container_state(container_name(name)) or "absent"
    return out

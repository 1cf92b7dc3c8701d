"""``iris agents spawn`` and ``iris agents remove``: a sub-agent created completely, or not at all.

Spawning is a sequence of steps, each with its undo pushed on a stack as it succeeds:

1. validate the name and the skills (nothing is touched before these pass);
2. register the agent in ``agents.json`` with a free bridge port, chosen under the registry lock,
   and its allow-list (the skills' declared secrets plus its provider's key). This step is
   unconditional: ``@name`` must work the moment spawn returns;
3. create its home (constitution, memory, skills, its own API token);
4. start it: a systemd unit, a process supervised by Iris, or a Docker container via Terraform;
5. wait for ``/health`` on its API port and one round trip through its bridge port;
6. commit the scaffold to the repo when a GitHub token is configured.

Any failure, Ctrl-C included, runs the undo stack, so no unit, container, registry entry or held
port is left behind. ``remove`` undoes a finished spawn the same way, keeping the home (memory,
logs) under ``<agents dir>/.removed`` unless asked to purge it.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from iris_runtime.agents import agent_launch, managers
from iris_runtime.agents.home import (
    AgentRecord,
    archive_home,
    create_home,
    delete_home,
    delete_record,
    skills_list,
)
from iris_runtime.agents.ports import allocate_bridge_port, port_of, ports_of, ports_of_homes
from iris_runtime.agents.readiness import wait_until_ready
from iris_runtime.agents.registry import (
    AgentEntry,
    AgentExists,
    AgentRegistry,
    registry_for,
)
from iris_runtime.agents.scaffold_commit import commit_repo_change
from iris_runtime.agents.spawn_checks import (
    MODES,
    check_extra_env,
    check_name,
    provider_key_vars,
    resolve_skills,
)
from iris_runtime.agents.spawn_config import API_PORT_OFFSET, SpawnConfig
from iris_runtime.config import Settings, known_api_token
from iris_runtime.engine.skills import Skill, secrets_for_skills
from iris_runtime.errors import ConfigError, InvalidInput, IrisError, NotFound, ProvisionError
from iris_runtime.provision.launch import AgentLaunch, AgentService, Progress, no_progress
from iris_runtime.tls import url_for

if TYPE_CHECKING:
    from iris_runtime.provision.docker import DockerAgents

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpawnRequest:
    name: str
    skills: tuple[str, ...] = ()
    mode: str = "service"
    model: str | None = None
    constitution: Path | None = None
    unique_token: bool = False
    service_manager: str | None = None  # overrides IRIS_SERVICE_MANAGER for this spawn
    extra_env: Mapping[str, str] = field(default_factory=dict)
    sandbox: str = "host"  # the agent's sandbox level; its own `iris serve` proves it


@dataclass(frozen=True)
class SpawnResult:
    entry: AgentEntry
    record: AgentRecord
    home: Path
    seconds: float


@dataclass(frozen=True)
class _Plan:
    """A spawn request checked and resolved, before anything is changed."""

    name: str
    manager: str
    backend: AgentService | DockerAgents
    skills: list[Skill]
    extra_env: dict[str, str]
    allow_list: list[str]
    token: str | None


class Spawner:
    def __init__(
        self,
        settings: Settings,
        *,
        config: SpawnConfig | None = None,
        plugin_skills: Sequence[Path] = (),
        progress: Progress = no_progress,
    ) -> None:
        self.settings = settings
        self.config = config or SpawnConfig.from_settings(settings)
        self.registry: AgentRegistry = registry_for(settings)
        self.plugin_skills = list(plugin_skills)
        self.progress = progress

    # -- spawn ----------------------------------------------------------------------------

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        started = time.monotonic()
        plan = self._plan(request)
        with contextlib.ExitStack() as undo:
            entry = self.registry.add(plan.name, self._choose_url, plan.allow_list, plan.token)
            undo.callback(self._unregister, plan.name)
            port = port_of(entry.bridge_url)
            self.progress(
                f"registered {plan.name}: bridge port {port}, API port {port + API_PORT_OFFSET}, "
                f"secrets {', '.join(entry.secrets) or '-'}"
            )
            home = self.config.agents_dir / plan.name
            create_home(
                home,
                repo_dir=self.config.repo_dir,
                values=self._scaffold_values(plan.name, port, plan.skills),
                skills=plan.skills,
                token=plan.token,
                constitution=request.constitution,
            )
            undo.callback(delete_home, home)
            self.progress(f"created home {home}")
            record = self._record(plan, request, port)
            record.write(self.config.agents_dir)
            undo.callback(delete_record, self.config.agents_dir, plan.name)
            launch = self.launch_for(record, home, plan.extra_env)
            entry = self._start(launch, request, plan, undo) or entry
            wait_until_ready(
                launch,
                plan.manager,
                self.config.health_timeout_seconds,
                self.progress,
                token=self.bridge_token(entry),
                cacert=self.settings.tls_cacert,
            )
            undo.pop_all()
        if plan.manager == "docker":
            self._commit_agents_tf(f"agents: spawn {plan.name} (docker)")
        seconds = time.monotonic() - started
        self.progress(
            f"{plan.name} is ready ({seconds:.1f} s): @{plan.name} answers through "
            f"{launch.bridge_url}"
        )
        return SpawnResult(entry=entry, record=record, home=home, seconds=seconds)

    def _plan(self, request: SpawnRequest) -> _Plan:
        """Every check that can fail before anything is changed: name, mode, skills, settings,
        the backend and whether it already holds something under this name."""
        name = check_name(request.name)
        if request.mode not in MODES:
            raise InvalidInput(f"--mode must be service or docker, not {request.mode!r}")
        skills = self.resolve_skills(request.skills)
        extra_env = check_extra_env(request.extra_env)
        manager = self.manager_for(request)
        if self.registry.get(name) is not None:
            raise AgentExists(
                f"an agent named {name!r} is already registered (left by an interrupted spawn? "
                f"`iris agents remove {name}` clears it)"
            )
        backend: AgentService | DockerAgents
        if manager == "docker":
            backend = self.docker()
            backend.preflight(name)
        else:
            backend = self.service(manager)
        if backend.exists(name):
            # Never adopt (and on rollback destroy) a unit, process or container that was
            # there before: it belongs to something else.
            raise AgentExists(
                f"{manager} already has an agent named {name!r} that is not registered; "
                f"`iris agents remove {name}` removes it"
            )
        provider = self.settings.provider
        return _Plan(
            name=name,
            manager=manager,
            backend=backend,
            skills=skills,
            extra_env=extra_env,
            allow_list=[*secrets_for_skills(skills), *provider_key_vars(provider)],
            # Docker agents get their token from the Terraform module instead.
            token=None if manager == "docker" else secrets.token_urlsafe(32),
        )

    def _record(self, plan: _Plan, request: SpawnRequest, port: int) -> AgentRecord:
        return AgentRecord(
            name=plan.name,
            mode=request.mode,
            manager=plan.manager,
            bridge_port=port,
            api_port=port + API_PORT_OFFSET,
            skills=tuple(s.name for s in plan.skills),
            provider=self.settings.provider,
            model=self._model(request),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            requested_model=request.model or None,
            unique_token=request.unique_token,
            sandbox=request.sandbox,
            extra_env=tuple(plan.extra_env.items()),
        )

    def _start(
        self, launch: AgentLaunch, request: SpawnRequest, plan: _Plan, undo: contextlib.ExitStack
    ) -> AgentEntry | None:
        """Start the agent; returns the updated entry when the start issued its token. The undo
        is pushed before ``install`` because an interrupted install may have created part of
        what it makes; ``_plan`` made sure nothing of that name existed before."""
        if plan.manager == "docker":
            docker = cast("DockerAgents", plan.backend)
            undo.callback(docker.remove, launch.name, self.progress)
            mode = self.settings.secrets_mode
            # store/proxy scope the allow-list by the agent's own token, so they require one.
            unique = request.unique_token or mode != "env"
            token = docker.install(
                launch, secrets_mode=mode, unique_token=unique, progress=self.progress
            )
            if token is None:
                return None
            # Same step as the apply: the container must never be left answering 401.
            entry = self.registry.register(launch.name, launch.bridge_url, token=token)
            self.progress(f"registered {launch.name}'s own API token (from the module output)")
            return entry
        service = cast(AgentService, plan.backend)
        undo.callback(service.remove, launch.name, self.progress)
        service.install(launch, self.progress)
        return None

    # -- start ----------------------------------------------------------------------------

    def start(self, name: str) -> None:
        """Start the spawned agent ``name`` that is installed but not running (a stopped or
        failed unit, process or container), then wait until it answers like spawn does."""
        name = check_name(name)
        record = AgentRecord.read(self.config.agents_dir, name)
        if record is None:
            raise NotFound(f"no spawned agent named {name!r} (no record)")
        if record.manager == "docker":
            from iris_runtime.provision.docker_cli import container_name, start_container

            self.progress(f"docker start {container_name(name)}")
            start_container(container_name(name))
        else:
            self.service(record.manager).start(name, self.progress)
        # The launch only tells where to look: its environment is not used to start anything.
        launch = self.launch_for(record, self.config.agents_dir / name, {})
        token = self.bridge_token(self.registry.get(name))
        timeout = self.config.health_timeout_seconds
        wait_until_ready(
            launch,
            record.manager,
            timeout,
            self.progress,
            token=token,
            cacert=self.settings.tls_cacert,
        )

    def bridge_token(self, entry: AgentEntry | None) -> str:
        """What Iris presents to the agent's bridge: its registered token, else her own."""
        return (entry.token if entry else None) or known_api_token(self.settings)

    # -- remove ---------------------------------------------------------------------------

    def remove(self, name: str, *, purge: bool = False) -> None:
        """Stop and delete agent ``name``: its unit, process or container, its Vault token, its
        registration; its home is archived (or deleted with ``purge``).

        A backend that cannot be reached (Docker down, no systemctl) does not stop the rest:
        the agent is still unregistered and its token revoked, so nothing can use it, and the
        error then names what may be left running."""
        name = check_name(name)
        home = self.config.agents_dir / name
        try:
            record = AgentRecord.read(self.config.agents_dir, name)
        except ConfigError as exc:
            self.progress(f"{exc.message}; looking for {name} everywhere")
            record = None
        registered = self.registry.get(name) is not None
        removed_any, left = self._stop_everywhere(name, record)
        if self._revoke_vault_identity(name):
            self.progress(f"revoked {name}'s Vault token and policy")
        if registered:
            self.registry.unregister(name)
            self.progress(f"unregistered {name}")
        if not (registered or removed_any or left or home.exists() or record is not None):
            raise NotFound(f"no agent named {name!r}: not registered, no home, nothing running")
        if not left:  # what may still run keeps its record and its home where they are
            delete_record(self.config.agents_dir, name)
            self._put_home_away(home, purge=purge)
        if removed_any and (record is None or record.manager == "docker"):
            self._commit_agents_tf(f"agents: remove {name} (docker)")
        if left:
            raise ProvisionError(
                f"{name} is unregistered, but stopping it failed: {'; '.join(left)}. "
                f"Run `iris agents remove {name}` again once that is fixed."
            )

    def _put_home_away(self, home: Path, *, purge: bool) -> None:
        if purge:
            delete_home(home)
            self.progress(f"deleted {home}")
        elif (kept := archive_home(home)) is not None:
            self.progress(f"kept its home (memory, logs) at {kept}")

    def _stop_everywhere(self, name: str, record: AgentRecord | None) -> tuple[bool, list[str]]:
        removed_any, problems = False, []
        for manager in managers.managers_to_check(record):
            try:
                backend = self.docker() if manager == "docker" else self.service(manager)
                if backend.exists(name):
                    self.progress(f"stopping {name} ({manager})")
                    removed_any |= backend.remove(name, self.progress)
            except (IrisError, OSError, subprocess.SubprocessError) as exc:
                problems.append(f"{manager}: {getattr(exc, 'message', exc)}")
        return removed_any, problems

    def _commit_agents_tf(self, message: str) -> None:
        commit_repo_change(
            self.config.repo_dir,
            "terraform/agents.tf",
            message,
            token_set=self.config.github_token_set,
            progress=self.progress,
        )

    def state(self, name: str) -> dict[str, object] | None:
        """How a spawned agent runs and whether it is up; None for an agent spawn did not make."""
        record = AgentRecord.read(self.config.agents_dir, name)
        if record is None:
            return None
        return managers.agent_state(self.settings, name, record.manager)

    def _revoke_vault_identity(self, name: str) -> bool:
        from iris_runtime.secrets.selection import backend_name

        if backend_name(self.settings) != "vault":
            return False
        from iris_runtime.secrets.vault_identity import AgentVaultIdentity

        identity = AgentVaultIdentity(self.settings)
        settings = self.settings
        credentials = settings.vault_token or (settings.vault_role_id and settings.vault_secret_id)
        if not credentials and not identity.has_token(name):
            # A command of Iris's own tools (the spawn-agent skill) runs without Iris's Vault
            # credentials; with no token of the agent's to revoke, only the cleanup of a policy
            # that was never written is left out.
            self.progress(f"{name} has no Vault token of its own: nothing to revoke")
            return False
        return identity.revoke(name)

    # -- pieces ---------------------------------------------------------------------------

    def resolve_skills(self, names: Sequence[str]) -> list[Skill]:
        """The named skills (the workspace's own and the plugins'), or an error naming every
        unknown one and what is available."""
        return resolve_skills(self.settings.workspace, self.plugin_skills, names)

    def manager_for(self, request: SpawnRequest) -> str:
        """The manager the agent runs under; refuses a sandbox level it cannot run there."""
        wanted = request.service_manager or self.config.service_manager
        return managers.choose_manager(request.mode, wanted, request.sandbox, self.progress)

    def service(self, manager: str) -> AgentService:
        return managers.service_for(manager, self.settings, self.config)

    def docker(self) -> DockerAgents:
        return managers.docker_agents(self.settings, self.config)

    def launch_for(
        self, record: AgentRecord, home: Path, extra_env: Mapping[str, str]
    ) -> AgentLaunch:
        return agent_launch.launch_for(self.settings, self.config, record, home, extra_env)

    def _choose_url(self, entries: dict[str, AgentEntry]) -> str:
        taken = ports_of(e.bridge_url for e in entries.values())
        taken.update(ports_of_homes(self.config.agents_dir))
        taken.add(self.settings.api_port)
        address = agent_launch.bridge_address(self.settings, self.config)
        port = allocate_bridge_port(self.config.ports, taken)
        return url_for(address["bridge_scheme"], address["bridge_host"], port)

    def _scaffold_values(self, name: str, port: int, skills: Sequence[Skill]) -> dict[str, str]:
        return {
            "AGENT_NAME": name,
            "BRIDGE_PORT": str(port),
            "API_PORT": str(port + API_PORT_OFFSET),
            "SKILLS": skills_list(skills),
            "CREATED": time.strftime("%Y-%m-%d", time.gmtime()),
        }

    def _model(self, request: SpawnRequest) -> str:
        return request.model or self.settings.subagent_model or self.settings.model

    def _unregister(self, name: str) -> None:
        self.registry.unregister(name)
        self.progress(f"rolled back: unregistered {name}")

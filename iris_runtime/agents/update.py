"""Changing a spawned service agent in place: new skills, allow-list or model, same agent.

``iris agents ensure`` used to replace an agent whose skills or model changed (remove, archive
its home, spawn afresh), so a declared agent lost its ``MEMORY.md`` and work whenever its
declaration moved. Here the agent keeps its home, token, ports and registration; what changes is
exactly what was declared. Nothing is recorded before the new agent answers:

1. the skills are resolved and the allow-list computed first (unknown skills fail before
   anything is touched), and the new unit is rendered and verified (systemd);
2. the agent is stopped (its unit or supervised process removed; the home stays), so its
   ``skills/`` are never swapped under a running agent;
3. ``skills/`` is swapped for the new set (the old set kept aside until the end);
4. the unit (or supervised process) is installed from the same template, with the new model and
   the spawn's ``--env`` settings, and it must answer like a fresh spawn (``/health`` plus one
   bridge round trip);
5. only then the registry entry gets the new allow-list (replaced, not merged), the bridge URL
   the launch answers on and the same token, and the record the new skills and model.

A failure in 3-4 (Ctrl-C included) puts the old skills back and installs the old unit again, so
the agent runs as before and the registry and record still describe it. The same path reinstalls
an agent whose record and registration are intact but whose unit or process is gone.

Docker agents are still replaced: their container is the unit of change.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from iris_runtime.agents.home import AgentRecord, replace_skills
from iris_runtime.agents.readiness import wait_until_ready
from iris_runtime.data_layout import SKILLS_DIR
from iris_runtime.engine.skills import secrets_for_skills
from iris_runtime.errors import IrisError, NotFound, ProvisionError
from iris_runtime.provision.unit_requests import HelperSystemd

if TYPE_CHECKING:
    from iris_runtime.agents.spawn import Spawner, SpawnRequest
    from iris_runtime.provision.launch import AgentLaunch, AgentService


def update_in_place(spawner: Spawner, request: SpawnRequest) -> AgentRecord:
    """Apply ``request``'s skills and model to the spawned service agent of that name (or
    reinstall its unit when that is gone)."""
    from iris_runtime.agents.spawn_checks import check_extra_env, check_name, provider_key_vars

    name = check_name(request.name)
    record = AgentRecord.read(spawner.config.agents_dir, name)
    entry = spawner.registry.get(name)
    if record is None or entry is None:
        raise NotFound(f"no spawned, registered agent named {name!r} to update")
    if record.mode != "service":
        raise ProvisionError(f"{name} is a {record.mode} agent: it is replaced, not updated")
    skills = spawner.resolve_skills(request.skills)
    allow_list = [*secrets_for_skills(skills), *provider_key_vars(spawner.settings.provider)]
    home = spawner.config.agents_dir / name
    extra_env = check_extra_env(dict(record.extra_env) | dict(request.extra_env))
    updated = replace(
        record,
        skills=tuple(s.name for s in skills),
        model=request.model or spawner.settings.subagent_model or spawner.settings.model,
        requested_model=request.model or None,
        extra_env=tuple(extra_env.items()),
    )
    service = spawner.service(record.manager)
    if isinstance(service, HelperSystemd):
        # Through the agent-unit helper Iris's user cannot write the agent's home (its user's
        # now), and the helper renders from the record on disk: updates are root's.
        raise ProvisionError(
            f"changing {name} in place needs root: run `iris agents ensure {name} ...` as root "
            "(the iris_agent role), or remove it and spawn it again"
        )
    launch = spawner.launch_for(updated, home, extra_env)
    _check_unit(service, launch, spawner)  # before anything is stopped
    token = spawner.bridge_token(entry)

    service.remove(name, spawner.progress)  # the unit only: the home stays
    aside = _set_skills_aside(home)
    try:
        replace_skills(home, skills)
        spawner.progress(f"skills of {name}: {', '.join(s.name for s in skills) or '-'}")
        service.install(launch, spawner.progress)
        wait_until_ready(
            launch,
            record.manager,
            spawner.config.health_timeout_seconds,
            spawner.progress,
            token=token,
            cacert=spawner.settings.tls_cacert,
        )
    except BaseException:
        old = spawner.launch_for(record, home, dict(record.extra_env))
        _roll_back(spawner, service, old, home, aside)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    entry = spawner.registry.register(
        name, launch.bridge_url, allow_list, entry.token, merge_secrets=False
    )
    spawner.progress(f"allow-list of {name}: {', '.join(entry.secrets) or '-'}")
    updated.write(spawner.config.agents_dir)
    return updated


def _check_unit(service: AgentService, launch: AgentLaunch, spawner: Spawner) -> None:
    from iris_runtime.provision.systemd import SystemdService

    if isinstance(service, SystemdService):
        service.checked_unit(launch, spawner.progress)


def _set_skills_aside(home: Path) -> Path | None:
    """Move the current ``skills/`` aside (the rollback puts it back); None when there is none."""
    current, aside = home / SKILLS_DIR, home / f".{SKILLS_DIR}.previous"
    shutil.rmtree(aside, ignore_errors=True)
    if not current.exists():
        return None
    current.rename(aside)
    return aside


def _roll_back(
    spawner: Spawner, service: AgentService, old: AgentLaunch, home: Path, aside: Path | None
) -> None:
    """The old skills and the old unit again; what fails here is reported, not raised (the
    original error is what the caller sees)."""
    name, progress = old.name, spawner.progress
    with contextlib.suppress(IrisError, OSError):
        service.remove(name, progress)
    if aside is not None:
        shutil.rmtree(home / SKILLS_DIR, ignore_errors=True)
        with contextlib.suppress(OSError):
            aside.rename(home / SKILLS_DIR)
    try:
        service.install(old, progress)
    except (IrisError, OSError) as exc:
        progress(f"rolling back {name}: reinstalling its previous unit failed too: {exc}")
    else:
        progress(f"rolled back {name}: its previous skills and unit are back")

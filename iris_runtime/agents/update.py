"""Changing a spawned service agent in place: new skills, allow-list or model, same agent.

``iris agents ensure`` used to replace an agent whose skills or model changed (remove, archive
its home, spawn afresh), so a declared agent lost its ``MEMORY.md`` and work whenever its
declaration moved. Here the agent keeps its home, token, ports and registration; what changes is
exactly what was declared:

1. the skills are resolved and the allow-list computed first (unknown skills fail before
   anything is touched);
2. ``skills/`` in its home is swapped for the new set (copied beside, then renamed in);
3. the registry entry gets the new allow-list (replaced, not merged), same URL and token;
4. the record gets the new skills and model;
5. its unit (or supervised process) is installed again from the same template, with the new
   model in its environment, and it must answer like a fresh spawn (``/health`` plus one bridge
   round trip).

Docker agents are still replaced: their container is the unit of change.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from iris_runtime.agents.home import AgentRecord, replace_skills
from iris_runtime.agents.readiness import wait_until_ready
from iris_runtime.engine.skills import secrets_for_skills
from iris_runtime.errors import NotFound, ProvisionError

if TYPE_CHECKING:
    from iris_runtime.agents.spawn import Spawner, SpawnRequest


def update_in_place(spawner: Spawner, request: SpawnRequest) -> AgentRecord:
    """Apply ``request``'s skills and model to the spawned service agent of that name."""
    from iris_runtime.agents.spawn import check_name, provider_key_vars

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

    replace_skills(home, skills)
    spawner.progress(f"skills of {name}: {', '.join(s.name for s in skills) or '-'}")
    entry = spawner.registry.register(
        name, entry.bridge_url, allow_list, entry.token, merge_secrets=False
    )
    spawner.progress(f"allow-list of {name}: {', '.join(entry.secrets) or '-'}")
    updated = replace(
        record,
        skills=tuple(s.name for s in skills),
        model=request.model or spawner.settings.subagent_model or spawner.settings.model,
        requested_model=request.model or None,
    )
    updated.write(spawner.config.agents_dir)

    service = spawner.service(record.manager)
    launch = spawner.launch_for(updated, home, {})
    service.remove(name, spawner.progress)  # the unit only: the home stays
    service.install(launch, spawner.progress)
    wait_until_ready(
        launch,
        record.manager,
        spawner.config.health_timeout_seconds,
        spawner.progress,
        token=entry.token or "",
        cacert=spawner.settings.tls_cacert,
    )
    return updated

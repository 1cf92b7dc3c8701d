"""``iris agents ensure``: bring one sub-agent to a declared state, changing only what differs.

This is what a deployment tool calls for every agent it declares (the Ansible role
``iris_agent`` does), so it must be idempotent: an unchanged declaration for an agent that runs
changes nothing and says so. Everything it does goes through :class:`~.spawn.Spawner`, the code
path of ``iris agents spawn``, ``remove`` and nothing else:

========================  ====================================================  ===========
declared / found          what happens                                          action
========================  ====================================================  ===========
present / missing         spawn                                                 created
present / same, running   nothing                                               unchanged
present / same, stopped   start it through its service manager, wait for it     started
present / skills, model   a service agent: new skills, allow-list, model and    updated
                          unit in place (home, memory, token, port kept)
present / unit gone       a service agent: its unit reinstalled in place         updated
present / differs         remove (home archived), then spawn                    replaced
absent / exists           remove (home archived)                                removed
absent / missing          nothing                                               absent
========================  ====================================================  ===========

"The same" compares what the declaration says: the set of skills, the mode, the model, the
service manager (only when one is asked for) and, for Docker agents, ``--unique-token``. A
Docker agent whose container is gone, and an agent whose registration is missing, is replaced
too; a service agent whose unit or process is gone is reinstalled in place.

The model is compared as it was asked for, so that an unchanged declaration never reads as a
change: ``--model M`` against the model the agent runs; no ``--model`` matches an agent spawned
without one whatever the default is now (spawn resolved it then), and one spawned with an
explicit model only when that is what the default gives now.

:meth:`Ensurer.plan` only reads (it is what ``--check`` reports); :meth:`Ensurer.apply` plans,
then acts.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.agents.home import AgentRecord
from iris_runtime.agents.registry import AgentEntry
from iris_runtime.agents.spawn import Spawner, SpawnRequest
from iris_runtime.agents.spawn_checks import MODES, check_name
from iris_runtime.agents.update import update_in_place
from iris_runtime.errors import InvalidInput, IrisError, NotFound, ProvisionError
from iris_runtime.provision.supervised import DB_NAME

STATES = ("present", "absent")
ACTIONS = ("created", "unchanged", "started", "updated", "replaced", "removed", "absent")
# Differences an in-place update covers (iris_runtime.agents.update); anything else replaces.
IN_PLACE = ("skills:", "model:", "user:")
UNCHANGED = frozenset({"unchanged", "absent"})
# What each manager reports for an agent that runs or is on its way to running by itself
# (a supervised process in back-off is restarted by the supervisor; starting it again would not
# be any sooner).
RUNNING_STATES = {
    "systemd": frozenset({"active", "activating", "reloading"}),
    "process": frozenset({"running", "starting", "backoff"}),
    "docker": frozenset({"running", "restarting"}),
}


class NotSpawned(IrisError):
    """The name is registered by hand (``iris agents register``), not spawned: not ours."""

    code = "agent_not_spawned"
    status = 409


@dataclass(frozen=True)
class Declaration:
    name: str
    skills: tuple[str, ...] = ()
    mode: str = "service"
    model: str | None = None
    unique_token: bool = False
    service_manager: str | None = None
    state: str = "present"
    sandbox: str = "host"

    def request(self) -> SpawnRequest:
        return SpawnRequest(
            name=self.name,
            skills=self.skills,
            mode=self.mode,
            model=self.model,
            unique_token=self.unique_token,
            service_manager=self.service_manager,
            sandbox=self.sandbox,
        )


@dataclass(frozen=True)
class Outcome:
    name: str
    action: str
    differences: tuple[str, ...] = ()
    check: bool = False

    @property
    def changed(self) -> bool:
        return self.action not in UNCHANGED

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "changed": self.changed,
            "action": self.action,
            "differences": list(self.differences),
            "check": self.check,
        }


class Ensurer:
    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner

    # -- deciding (read-only) ---------------------------------------------------------------

    def plan(self, declaration: Declaration) -> Outcome:
        """What :meth:`apply` would do; reads only (no file, row or unit is created)."""
        name = check_name(declaration.name)
        if declaration.state not in STATES:
            raise InvalidInput(f"--state must be present or absent, not {declaration.state!r}")
        entry = self.spawner.registry.get(name)
        record = AgentRecord.read(self.spawner.config.agents_dir, name)
        if declaration.state == "absent":
            found = entry is not None or record is not None or self._leftovers(name)
            return Outcome(name, "removed" if found else "absent", check=True)
        if declaration.mode not in MODES:
            raise InvalidInput(f"--mode must be service or docker, not {declaration.mode!r}")
        self.spawner.resolve_skills(declaration.skills)  # unknown skills fail before anything
        self.spawner.manager_for(declaration.request())  # so does an impossible manager
        if record is None:
            if entry is not None:
                raise NotSpawned(
                    f"{name!r} is registered but was not spawned by Iris (no record in "
                    f"{self.spawner.config.agents_dir / '.records'}); `iris agents remove {name}` "
                    "first if it should be replaced by a spawned agent"
                )
            return Outcome(name, "created", check=True)
        differences = self.differences(declaration, record, entry)
        # A service agent whose record and registration are intact is changed (or, its unit
        # gone, reinstalled) in place: its home, memory and token stay.
        in_place = record.mode == "service" and all(d.startswith(IN_PLACE) for d in differences)
        if differences and in_place:
            return Outcome(name, "updated", tuple(differences), check=True)
        if differences:
            return Outcome(name, "replaced", tuple(differences), check=True)
        verdict, state = self._run_state(record)
        if verdict == "missing":
            action = "updated" if record.mode == "service" else "replaced"
            return Outcome(name, action, (f"not installed in {record.manager}",), check=True)
        if verdict == "start":
            return Outcome(name, "started", (f"{record.manager} state: {state}",), check=True)
        return Outcome(name, "unchanged", check=True)

    def differences(
        self, declaration: Declaration, record: AgentRecord, entry: AgentEntry | None
    ) -> list[str]:
        out: list[str] = []
        if record.mode != declaration.mode:
            out.append(f"mode: {record.mode} -> {declaration.mode}")
        wanted_manager = declaration.service_manager
        if declaration.mode == "service" and wanted_manager and record.manager != wanted_manager:
            out.append(f"service manager: {record.manager} -> {wanted_manager}")
        have, want = sorted(set(record.skills)), sorted(set(declaration.skills))
        if have != want:
            out.append(f"skills: {', '.join(have) or '-'} -> {', '.join(want) or '-'}")
        model = self._model_difference(declaration, record)
        if model:
            out.append(model)
        if record.sandbox != declaration.sandbox:
            out.append(f"sandbox: {record.sandbox} -> {declaration.sandbox}")
        if user := self._user_difference(record):
            out.append(user)
        if declaration.mode == "docker" == record.mode:
            # Store and proxy secrets imply a token of its own: compared as it takes effect.
            implied = self.spawner.settings.secrets_mode != "env"
            had, wants = record.unique_token or implied, declaration.unique_token or implied
            if had != wants:
                out.append(f"unique token: {str(had).lower()} -> {str(wants).lower()}")
        if entry is None:
            out.append("not registered")
        return out

    def _user_difference(self, record: AgentRecord) -> str | None:
        """A systemd agent installed under another user (the shared ``iris-agent`` of earlier
        versions) moves to its own, in place."""
        if record.manager != "systemd":
            return None
        from iris_runtime.provision.systemd import SystemdService

        service = self.spawner.service("systemd")
        if not isinstance(service, SystemdService):
            return None
        have, want = service.installed_user(record.name), service.user_for(record.name)
        return f"user: {have} -> {want}" if have is not None and have != want else None

    def _model_difference(self, declaration: Declaration, record: AgentRecord) -> str | None:
        if declaration.model:
            if record.model != declaration.model:
                return f"model: {record.model} -> {declaration.model}"
            return None
        if record.requested_model is None:
            return None  # spawned with the default, declared with the default
        settings = self.spawner.settings
        default = settings.subagent_model or settings.model
        if record.model != default:
            return f"model: {record.model} -> the default ({default})"
        return None

    def _run_state(self, record: AgentRecord) -> tuple[str, str]:
        """("ok" | "start" | "missing", what the manager reports)."""
        name, manager = record.name, record.manager
        if manager == "process" and not (self.spawner.settings.data_dir / DB_NAME).exists():
            return "missing", "no state.db"  # never created here: this only reads
        if manager == "systemd" and not self.spawner.service("systemd").exists(name):
            return "missing", "no unit file"
        try:
            state = self.spawner.state(name)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ProvisionError(f"cannot ask {manager} about {name}: {exc}") from None
        reported = str((state or {}).get("state", "unknown"))
        if state is None or (manager == "process" and reported == "unknown"):
            return "missing", reported  # no supervised row
        if manager == "docker" and reported == "absent":
            return "missing", reported
        ok = RUNNING_STATES.get(manager, frozenset())
        return ("ok" if reported in ok else "start"), reported

    def _leftovers(self, name: str) -> bool:
        """A unit, supervised row or home of ``name`` without a record or registration (what
        ``remove`` cleans up too), found without creating anything."""
        config, settings = self.spawner.config, self.spawner.settings
        if (config.agents_dir / name).exists():
            return True
        if Path("/run/systemd/system").is_dir() and self.spawner.service("systemd").exists(name):
            return True
        if (settings.data_dir / DB_NAME).exists():
            from iris_runtime.provision.process_service import ProcessService

            return ProcessService(settings.data_dir).exists(name)
        return False

    # -- acting ---------------------------------------------------------------------------------

    def apply(self, declaration: Declaration) -> Outcome:
        planned = self.plan(declaration)
        name, action = planned.name, planned.action
        done = Outcome(name, action, planned.differences, check=False)
        if action in UNCHANGED:
            return done
        if action == "removed":
            try:
                self.spawner.remove(name)
            except NotFound:
                return Outcome(name, "absent")  # removed meanwhile by someone else
            return done
        if action == "started":
            self.spawner.start(name)
            return done
        if action == "updated":
            update_in_place(self.spawner, declaration.request())
            return done
        if action == "replaced":
            self.spawner.remove(name)
            try:
                self.spawner.spawn(declaration.request())
            except IrisError as exc:
                raise ProvisionError(
                    f"{exc.message} (the previous {name} was removed first, its home kept "
                    f"under {self.spawner.config.agents_dir / '.removed'})"
                ) from None
            return done
        self.spawner.spawn(declaration.request())
        return done

"""The root-owned agent-unit helper: ``python -m iris_runtime.agents.unit_helper
install|start|remove NAME``, run by systemd as ``iris-agent-<verb>@NAME.service`` when an
unprivileged Iris asks (see ``provision/unit_requests``).

It is the narrow privilege path of chat-driven spawning, so it trusts Iris for nothing but the
name. Where units go, which template renders them, whose users run them and which paths they
hide come from the helper unit's own environment, written by the Ansible role as root
(:data:`TRUSTED`); of Iris's env file only the plain settings that end up in the agent's own
environment are read (:data:`FROM_IRIS`), never a path root would open. The agent's record and
home are Iris's files and are read as untrusted input: a regular file and a real folder of the
agents dir's owner, the name, ports and sandbox level checked against the rules a spawn applies;
the home changes hands by descriptor (``home_handover``), and only below an agents dir whose
every parent is root's alone. The unit is then rendered from the project's template, verified
and started exactly as a root ``iris agents spawn`` would. Each request is logged to the journal
(``journalctl -u 'iris-agent-*@*'``), and its outcome, without secrets, is left in
``/run/iris-agent-units/<verb>-<name>.json`` for Iris to report.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import sys
from pathlib import Path

from iris_runtime.agents.home import AgentRecord, record_path
from iris_runtime.agents.spawn import Spawner
from iris_runtime.agents.spawn_checks import INHERITED_VARS, check_extra_env, check_name
from iris_runtime.agents.spawn_config import API_PORT_OFFSET, level_refusal
from iris_runtime.config import Settings
from iris_runtime.errors import IrisError, ProvisionError
from iris_runtime.provision.home_handover import hand_over, safe_ancestors
from iris_runtime.provision.systemd import SystemdService
from iris_runtime.provision.unit_requests import RESULTS_DIR, VERBS, result_path
from iris_runtime.secrets.env_store import parse_env_file

# Settings only root may choose: taken from the helper's own environment, never from Iris's env
# file (a unit directory, a template or a credential path from Iris would be root's for Iris).
TRUSTED = (
    "IRIS_DATA_DIR",
    "IRIS_AGENTS_DIR",
    "IRIS_REPO_DIR",
    "IRIS_SYSTEMD_UNIT_DIR",
    "IRIS_AGENT_USER",
    "IRIS_AGENT_PORTS",
    "IRIS_AGENT_TLS_CERT",
    "IRIS_AGENT_TLS_KEY",
    "IRIS_TLS_CACERT",
    "IRIS_ENV_FILE",
)
# What Iris's env file may set for the agents: plain values that go into their environment or
# their broker URL. Nothing naming a file root would read (tokens, secret ids, CA bundles).
FROM_IRIS = (
    *(name for name in INHERITED_VARS if name not in TRUSTED),
    "IRIS_AGENT_BROKER_URL",
    "IRIS_API_HOST",
    "IRIS_API_PORT",
    "IRIS_SECRETS_MODE",
    "IRIS_PROVIDER",
    "IRIS_MODEL",
    "IRIS_SUBAGENT_MODEL",
)


def helper_settings(environ: dict[str, str]) -> Settings:
    """Iris's env file for the agent's environment, the helper's own for every trusted key."""
    env_file = environ.get("IRIS_ENV_FILE", "")
    base: dict[str, str] = {}
    if env_file:
        try:
            base = parse_env_file(Path(env_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ProvisionError(f"IRIS_ENV_FILE {env_file}: cannot read: {exc}") from None
    env = {k: v for k, v in base.items() if k in FROM_IRIS}
    env |= {k: environ[k] for k in TRUSTED if environ.get(k)}
    env |= {"IRIS_SERVICE_MANAGER": "systemd", "PATH": environ.get("PATH", "/usr/bin:/bin")}
    return Settings.from_env(env)


class UnitHelper:
    def __init__(self, settings: Settings) -> None:
        self.steps: list[str] = []
        self.spawner = Spawner(settings, progress=self.steps.append)
        self.agents_dir = self.spawner.config.agents_dir
        info = os.stat(self.agents_dir, follow_symlinks=False)
        self.owner, self.group = info.st_uid, info.st_gid

    def service(self) -> SystemdService:
        config = self.spawner.config
        return SystemdService(
            config.repo_dir, config.unit_dir, user=config.agent_user, hand_over=self._to_agent
        )

    def install(self, name: str) -> None:
        self._check_agents_dir()
        record = self._record(name)
        home = self._home(name)
        launch = self.spawner.launch_for(record, home, check_extra_env(dict(record.extra_env)))
        self.service().install(launch, self.steps.append)

    def start(self, name: str) -> None:
        """Start an installed agent that is not running (``iris agents ensure``'s "started")."""
        self._record(name)
        service = self.service()
        unit = service.unit_path(name)
        if not unit.is_file() or unit.is_symlink():
            raise ProvisionError(f"{unit} is not installed: nothing to start")
        service.start(name, self.steps.append)

    def remove(self, name: str) -> None:
        self._check_agents_dir()
        service = self.service()
        service.remove(name, self.steps.append)
        if service.exists(name):
            raise ProvisionError(f"{service.unit_path(name)} is still there: its home stays")
        home = self.agents_dir / name
        try:
            agent = pwd.getpwnam(service.user_for(name))
        except KeyError:
            return  # never installed under its own user: nothing to hand back
        if _real_folder(home) and os.stat(home, follow_symlinks=False).st_uid == agent.pw_uid:
            # Back to Iris's user, who archives (or deletes) it next; only what the agent's
            # user has there (another agent's home moved in under this name is not touched).
            hand_over(home, agent.pw_uid, self.owner, self.group)
            self.steps.append(f"handed {home} back to uid {self.owner}")

    def _to_agent(self, home: Path, user: str) -> None:
        agent = pwd.getpwnam(user)
        hand_over(home, self.owner, agent.pw_uid, agent.pw_gid)

    def _check_agents_dir(self) -> None:
        if problem := safe_ancestors(self.agents_dir):
            raise ProvisionError(problem)

    def _record(self, name: str) -> AgentRecord:
        path = record_path(self.agents_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise ProvisionError(f"no record of {name} at {path}: {exc.strerror}") from None
        with os.fdopen(fd, encoding="utf-8") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self.owner:
                raise ProvisionError(f"{path} is not a record Iris wrote")
            text = handle.read(1 << 20)
        try:
            record = AgentRecord.from_json(text)
        except (ValueError, TypeError, AttributeError):
            raise ProvisionError(f"{path} is not a valid agent record") from None
        self._check(record, name)
        return record

    def _check(self, record: AgentRecord, name: str) -> None:
        ports = self.spawner.config.ports
        if record.name != name or record.mode != "service" or record.manager != "systemd":
            raise ProvisionError(f"the record of {name} is not a systemd agent's")
        if not (ports.first <= record.bridge_port <= ports.last) or (
            record.api_port != record.bridge_port + API_PORT_OFFSET
        ):
            raise ProvisionError(f"the record of {name} names ports outside IRIS_AGENT_PORTS")
        if refusal := level_refusal("systemd", record.sandbox):
            raise ProvisionError(refusal)

    def _home(self, name: str) -> Path:
        home = self.agents_dir / name
        try:
            info = os.stat(home, follow_symlinks=False)
        except OSError:
            info = None
        if info is None or not stat.S_ISDIR(info.st_mode):  # a link is not a folder here
            raise ProvisionError(f"{home} is not a folder of the agents dir")
        if info.st_uid != self.owner:
            raise ProvisionError(f"{home} does not belong to the agents dir's owner")
        return home


def _real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode)
    except OSError:
        return False


def run(verb: str, name: str) -> int:
    try:
        check_name(name)
        if verb not in VERBS:
            raise ProvisionError(f"unknown verb {verb!r} ({', '.join(VERBS)})")
    except IrisError as exc:  # nowhere to report but the journal: the name names the file
        print(f"iris-agent-unit: refused: {exc.message}", flush=True)
        return 1
    steps: list[str] = []
    group = 0
    try:
        helper = UnitHelper(helper_settings(dict(os.environ)))
        steps, group = helper.steps, helper.group
        getattr(helper, verb)(name)
    except (IrisError, OSError, ValueError) as exc:  # ValueError: undecodable input
        message = getattr(exc, "message", None) or str(exc)
        print(f"iris-agent-unit {verb} {name}: refused or failed: {message}", flush=True)
        _write_result(verb, name, {"ok": False, "message": message, "steps": steps}, group)
        return 1
    print(f"iris-agent-unit {verb} {name}: done", flush=True)
    _write_result(verb, name, {"ok": True, "steps": steps}, group)
    return 0


def _write_result(verb: str, name: str, outcome: dict[str, object], group: int) -> None:
    """Root's folder, so Iris can read what happened (group ``group``: the agents dir's) and
    change nothing of it; no other user, agents included, reads it."""
    try:
        RESULTS_DIR.mkdir(mode=0o755, exist_ok=True)
        path = result_path(verb, name)
        scratch = path.with_name(f".{path.name}.tmp")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o640)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchown(handle.fileno(), 0, group)
            os.fchmod(handle.fileno(), 0o640)
            handle.write(json.dumps(outcome))
        os.replace(scratch, path)
    except (OSError, ValueError):
        pass  # the journal still has it


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: python -m iris_runtime.agents.unit_helper {'|'.join(VERBS)} NAME")
        return 2
    if os.geteuid() != 0:
        print("the agent-unit helper runs as root (as iris-agent-install@NAME.service)")
        return 2
    return run(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))

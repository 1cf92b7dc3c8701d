"""The root-owned agent-unit helper: ``python -m iris_runtime.agents.unit_helper install|remove
NAME``, run by systemd as ``iris-agent-install@NAME.service`` / ``iris-agent-remove@NAME``
when an unprivileged Iris asks (see ``provision/unit_requests``).

It is the narrow privilege path of chat-driven spawning, so it trusts Iris for nothing but the
name. Where units go, which template renders them, whose users run them and which paths they
hide come from the helper unit's own environment, written by the Ansible role as root
(:data:`TRUSTED`); Iris's env file only supplies what ends up in the agent's own environment.
The agent's record and home are Iris's files and are read as untrusted input: a regular file and
a real folder of the agents dir's owner, the name, ports and sandbox level checked against the
rules a spawn applies. The unit is then rendered from the project's template, verified and
started exactly as a root ``iris agents spawn`` would. Each request is logged to the journal
(``journalctl -u 'iris-agent-*@*'``), and its outcome, without secrets, is left in
``/run/iris-agent-units/<verb>-<name>.json`` for Iris to report.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from iris_runtime.agents.home import AgentRecord, record_path
from iris_runtime.agents.spawn import Spawner, check_extra_env, check_name
from iris_runtime.agents.spawn_config import API_PORT_OFFSET, level_refusal
from iris_runtime.config import Settings
from iris_runtime.errors import IrisError, ProvisionError
from iris_runtime.provision.systemd import SystemdService
from iris_runtime.provision.unit_requests import HELPER_VARIABLE, RESULTS_DIR, VERBS, result_path
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
    "IRIS_ENV_FILE",
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
    env = {k: v for k, v in base.items() if k not in TRUSTED and k != HELPER_VARIABLE}
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
        return SystemdService(config.repo_dir, config.unit_dir, user=config.agent_user)

    def install(self, name: str) -> None:
        record = self._record(name)
        home = self._home(name)
        launch = self.spawner.launch_for(record, home, check_extra_env(dict(record.extra_env)))
        self.service().install(launch, self.steps.append)

    def remove(self, name: str) -> None:
        self.service().remove(name, self.steps.append)
        home = self.agents_dir / name
        if _real_folder(home):
            # Back to Iris's user, who archives (or deletes) it next.
            done = subprocess.run(
                ["chown", "-R", "--no-dereference", f"{self.owner}:{self.group}", str(home)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if done.returncode != 0:
                raise ProvisionError(f"cannot hand {home} back: {done.stderr.strip()}")
            self.steps.append(f"handed {home} back to uid {self.owner}")

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
            raw = json.loads(text)
            raw["skills"] = tuple(raw.get("skills", ()))
            raw["extra_env"] = tuple((str(k), str(v)) for k, v in raw.get("extra_env", ()))
            record = AgentRecord(**raw)
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
        info = os.stat(home, follow_symlinks=False) if home.exists() else None
        if info is None or not stat.S_ISDIR(info.st_mode) or not _real_folder(home):
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
            raise ProvisionError(f"unknown verb {verb!r} (install or remove)")
    except IrisError as exc:  # nowhere to report but the journal: the name names the file
        print(f"iris-agent-unit: refused: {exc.message}", flush=True)
        return 1
    steps: list[str] = []
    try:
        helper = UnitHelper(helper_settings(dict(os.environ)))
        steps = helper.steps
        getattr(helper, verb)(name)
    except (IrisError, OSError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        print(f"iris-agent-unit {verb} {name}: refused or failed: {message}", flush=True)
        _write_result(verb, name, {"ok": False, "message": message, "steps": steps})
        return 1
    print(f"iris-agent-unit {verb} {name}: done", flush=True)
    _write_result(verb, name, {"ok": True, "steps": steps})
    return 0


def _write_result(verb: str, name: str, outcome: dict[str, object]) -> None:
    """Root's folder, so Iris can read what happened and change nothing of it."""
    try:
        RESULTS_DIR.mkdir(mode=0o755, exist_ok=True)
        path = result_path(verb, name)
        scratch = path.with_name(f".{path.name}.tmp")
        scratch.write_text(json.dumps(outcome), encoding="utf-8")
        scratch.chmod(0o644)
        os.replace(scratch, path)
    except (OSError, ValueError):
        pass  # the journal still has it


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m iris_runtime.agents.unit_helper install|remove NAME")
        return 2
    if os.geteuid() != 0:
        print("the agent-unit helper runs as root (as iris-agent-install@NAME.service)")
        return 2
    return run(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))

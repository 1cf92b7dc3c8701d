"""Running this repository's playbooks from tests: an inventory for a booted ``NspawnHost`` and an
``ansible-playbook`` runner that keeps a log and reads the play recap.

The container is reached with ``community.docker.nsenter`` (``ansible_nsenter_pid`` = its init,
which changes on every boot, so the inventory is rewritten before each run). Root inside has no
sudo (the test rootfs is minimal), so plays that ``become`` use ``su``, which root may use without
a password. Variables go into the inventory's ``group_vars/all.yml``, as an operator would keep
them; per-run overrides go into a file passed with ``-e @file`` (values never on a command line).

Output streams into a log file under the test's temp dir (``AnsibleRun.log``), named in every
assertion message so a failed converge can be read afterwards.

Fixture: ``ansible_nspawn_host`` (package scope): a bare server (the shared rootfs on a persistent
overlay, nothing of the controller bound in) and its ``AnsibleHost``, stopped at the package's end.
Import it with ``debian_rootfs`` from ``tests.provisioning.rootfs`` into the conftest.py of the
package whose test modules share the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.provisioning.nspawn import NspawnHost
from tests.provisioning.rootfs import require_root_and

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent
GROUPS = ("iris_secrets", "iris_runtime", "iris_agents")
_RECAP_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$")
_TASK_LINE = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.*)\] \**$")
_RESULT_LINE = re.compile(r"^(?P<status>changed|fatal|failed): \[(?P<host>[^\]]+)\]")


def ansible_tools_missing() -> list[str]:
    return [tool for tool in ("ansible-playbook", "ansible-lint") if not (BIN_DIR / tool).exists()]


def require_ansible() -> None:
    missing = ansible_tools_missing()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[deploy]'; make test does)")


@dataclass
class Recap:
    """One host's line of the PLAY RECAP."""

    ok: int = 0
    changed: int = 0
    unreachable: int = 0
    failed: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class AnsibleRun:
    returncode: int
    output: str
    log: Path
    seconds: float
    recap: dict[str, Recap] = field(default_factory=dict)
    # Task names (as printed: "role : Task") per status and host, in order.
    changed_tasks: dict[str, list[str]] = field(default_factory=dict)
    failed_tasks: dict[str, list[str]] = field(default_factory=dict)

    def describe(self, host: str | None = None) -> str:
        """A short summary for assertion messages: recap, changed and failed tasks, the log."""
        hosts = [host] if host else sorted(self.recap)
        lines = [f"ansible-playbook exited {self.returncode} after {self.seconds:.1f} s"]
        for name in hosts:
            lines.append(f"{name}: {self.recap.get(name)}")
            lines += [f"  changed: {task}" for task in self.changed_tasks.get(name, [])]
            lines += [f"  failed:  {task}" for task in self.failed_tasks.get(name, [])]
        lines.append(f"log: {self.log}")
        return "\n".join(lines)


TaskNames = dict[str, list[str]]  # host -> task names


def parse_output(output: str) -> tuple[dict[str, Recap], TaskNames, TaskNames]:
    """The recap and the changed/failed task names from the default callback's text output."""
    recap: dict[str, Recap] = {}
    changed: dict[str, list[str]] = {}
    failed: dict[str, list[str]] = {}
    task = ""
    in_recap = False
    for raw in output.splitlines():
        line = raw.rstrip()
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        if in_recap:
            match = _RECAP_LINE.match(line.strip())
            if match:
                counts = dict(pair.split("=") for pair in match["counts"].split())
                recap[match["host"]] = Recap(**{k: int(v) for k, v in counts.items()})
            continue
        task_match = _TASK_LINE.match(line)
        if task_match:
            task = task_match["name"]
            continue
        result = _RESULT_LINE.match(line)
        if result:
            bucket = changed if result["status"] == "changed" else failed
            bucket.setdefault(result["host"], []).append(task)
    return recap, changed, failed


def nsenter_connection(host: NspawnHost) -> dict[str, Any]:
    """How Ansible reaches a booted container (its init pid changes on every boot)."""
    return {
        "ansible_connection": "community.docker.nsenter",
        "ansible_nsenter_pid": host.pid,
        "ansible_python_interpreter": "/usr/bin/python3",
        # nsenter already runs as root; a minimal Debian has su but no sudo.
        "ansible_become_method": "ansible.builtin.su",
    }


def nsenter_inventory(
    host: NspawnHost,
    host_vars: Mapping[str, Any] | None = None,
    groups: Sequence[str] = GROUPS,
) -> dict[str, Any]:
    """The inventory (as data) of one container in ``groups``."""
    connection = nsenter_connection(host)
    return {
        "all": {
            "hosts": {host.name: {**connection, **(host_vars or {})}},
            "children": {group: {"hosts": {host.name: None}} for group in groups},
        }
    }


class AnsibleHost:
    """Playbook runs against one ``NspawnHost`` with an inventory under ``workdir``.

    ``group_vars`` becomes ``<workdir>/inventory/group_vars/all.yml``; change it with
    :meth:`set_vars` between runs."""

    def __init__(
        self,
        host: NspawnHost,
        workdir: Path,
        group_vars: Mapping[str, Any] | None = None,
        *,
        groups: Sequence[str] = GROUPS,
    ) -> None:
        self.host = host
        self.workdir = workdir
        self.groups = tuple(groups)
        self.inventory = workdir / "inventory"
        self.group_vars: dict[str, Any] = dict(group_vars or {})
        self._runs = 0
        for sub in ("inventory/group_vars", "tmp", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o700)  # group_vars may hold test secrets

    @property
    def name(self) -> str:
        return self.host.name

    def set_vars(self, **values: Any) -> None:
        self.group_vars.update(values)

    def write_inventory(self) -> Path:
        """(Re)write hosts.yml (the init pid changes on every boot) and group_vars/all.yml."""
        hosts = self.inventory / "hosts.yml"
        hosts.write_text(json.dumps(nsenter_inventory(self.host, groups=self.groups), indent=2))
        all_vars = self.inventory / "group_vars" / "all.yml"
        all_vars.write_text(json.dumps(self.group_vars, indent=2))  # JSON is YAML
        return self.inventory

    def playbook(
        self,
        playbook: str | Path,
        *,
        extra_vars: Mapping[str, Any] | None = None,
        check: bool = False,
        diff: bool = False,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 1500.0,
        label: str = "",
    ) -> AnsibleRun:
        """Run ``ansible-playbook`` (a path relative to the repository, or absolute)."""
        self.write_inventory()
        self._runs += 1
        stem = f"{self._runs:02d}-{label or Path(playbook).stem}"
        argv: list[str] = ["-i", str(self.inventory)]
        if extra_vars:
            extra = self.workdir / "tmp" / f"{stem}-extra-vars.json"
            extra.write_text(json.dumps(dict(extra_vars)))
            extra.chmod(0o600)
            argv += ["-e", f"@{extra}"]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        return run_playbook(
            REPO / playbook,
            [*argv, *args],
            log=self.workdir / "logs" / f"{stem}.log",
            tmp=self.workdir / "tmp",
            env=env,
            timeout=timeout,
        )


def ansible_env(tmp: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A controlled environment: this repository's ansible.cfg, temp dirs under ``tmp``, no
    colour, the venv's tools first on PATH, nothing inherited that starts with ANSIBLE_."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "local"),
            "ANSIBLE_HOME": str(tmp / "home"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "PATH": f"{BIN_DIR}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
            "PYTHONUNBUFFERED": "1",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
    )
    env.update(extra or {})
    return env


def run_playbook(
    playbook: Path,
    args: Sequence[str],
    *,
    log: Path,
    tmp: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 1500.0,
) -> AnsibleRun:
    """``ansible-playbook <args> <playbook>`` from the repository root, output streamed to
    ``log`` (read it while a long run is going), recap parsed at the end."""
    tmp.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [str(BIN_DIR / "ansible-playbook"), *args, str(playbook)]
    started = time.monotonic()
    with log.open("wb") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=ansible_env(tmp, env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
            raise AssertionError(f"ansible-playbook ran over {timeout:.0f} s; log: {log}") from None
    seconds = time.monotonic() - started
    output = log.read_text(errors="replace")
    recap, changed, failed = parse_output(output)
    return AnsibleRun(returncode, output, log, seconds, recap, changed, failed)


# What the iris_runtime role packs from a checkout (roles/iris_runtime/tasks/install.yml).
CHECKOUT_PARTS = (
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "Dockerfile",
    ".dockerignore",
    "iris_runtime",
    "agents",
    "terraform",
    "plugins",
)


def snapshot_checkout(target: Path) -> Path:
    """A copy of the checkout's runtime parts, for ``iris_runtime_source_dir``: edits to the
    working tree while a converge test runs must not look like a change of the sources."""
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.egg-info", ".terraform", "*.tfstate*", ".pytest_cache", "build"
    )
    target.mkdir(parents=True, exist_ok=True)
    for part in CHECKOUT_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, target / part)
    return target


def lint_tool(name: str) -> str:
    """Path of a tool from the venv (ansible-lint, ansible-playbook), else from PATH."""
    candidate = BIN_DIR / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


@contextlib.contextmanager
def bare_server(rootfs: Path, workdir: Path) -> Iterator[AnsibleHost]:
    """Boot ``rootfs`` as a fresh server whose changes survive ``restart()`` (kept under
    ``workdir``), with an ``AnsibleHost`` for it; powered off on exit."""
    host = NspawnHost(
        rootfs,
        log_file=workdir / "console.log",
        overlay_dir=workdir / "overlay",
    )
    workdir.mkdir(parents=True, exist_ok=True)
    with host:
        yield AnsibleHost(host, workdir / "ansible")


@pytest.fixture(scope="package")
def ansible_nspawn_host(
    debian_rootfs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnsibleHost]:
    require_root_and("systemd-nspawn", "nsenter", "unshare")
    require_ansible()
    with bare_server(debian_rootfs, tmp_path_factory.mktemp("ansible-host")) as server:
        yield server

"""Service mode for an unprivileged Iris (``iris.service`` on a deployed host): the units of its
sub-agents are written by a root-owned helper, never by Iris itself.

Iris asks systemd to start ``iris-agent-install@NAME.service``, ``iris-agent-start@NAME`` or
``iris-agent-remove@NAME``: template units the Ansible role installs, which run ``python -m
iris_runtime.agents.unit_helper`` as root. A polkit rule lets Iris's user start exactly those
three templates, nothing else (not even the agents' own units: on systemd 257 and later a
transient unit of such a name would pass a rule that allowed them). The helper rebuilds the unit
from the project's template and its own root-owned settings, taking from Iris only the agent's
name and what its record says (checked as untrusted input), and says how it went in
``/run/iris-agent-units/<verb>-<name>.json``; journald keeps its log, out of Iris's reach.

So the spawn-agent skill works on a deployed host: chat → ``iris agents spawn`` as Iris's user →
the helper → a hardened unit, as if root had run the spawn.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import AgentLaunch, Progress
from iris_runtime.provision.unit import unit_file_name

HELPER_VARIABLE = "IRIS_AGENT_UNIT_HELPER"  # "1": this Iris spawns through the helper
RESULTS_DIR = Path("/run/iris-agent-units")
VERBS = ("install", "start", "remove")
_TIMEOUT = 300.0  # an install waits for the agent to settle; a remove for its stop


def helper_unit(verb: str, name: str) -> str:
    unit_file_name(name)  # refuses a name that cannot be part of a unit
    if verb not in VERBS:
        raise ValueError(f"unknown helper verb {verb!r}")
    return f"iris-agent-{verb}@{name}.service"


def result_path(verb: str, name: str, results_dir: Path = RESULTS_DIR) -> Path:
    return results_dir / f"{verb}-{name}.json"


class HelperSystemd:
    """An :class:`~iris_runtime.provision.launch.AgentService` whose privileged steps go through
    the helper; it reads and starts units as Iris's own user."""

    kind = "systemd"

    def __init__(
        self,
        unit_dir: Path = Path("/etc/systemd/system"),
        systemctl: str | Sequence[str] = "systemctl",
        *,
        results_dir: Path = RESULTS_DIR,
    ) -> None:
        self.unit_dir = Path(unit_dir)
        self.systemctl = (systemctl,) if isinstance(systemctl, str) else tuple(systemctl)
        self.results_dir = results_dir

    def exists(self, name: str) -> bool:
        return (self.unit_dir / unit_file_name(name)).exists()

    def install(self, launch: AgentLaunch, progress: Progress) -> None:
        # The helper rebuilds the launch from the agent's record: nothing of it travels.
        self._ask("install", launch.name, progress)

    def remove(self, name: str, progress: Progress) -> bool:
        existed = self.exists(name)
        self._ask("remove", name, progress)
        return existed

    def start(self, name: str, progress: Progress) -> None:
        # Through the helper too: polkit grants Iris no verb on the agents' own units (on newer
        # systemd a transient unit of that name would be root's for the asking).
        self._ask("start", name, progress)

    def _ask(self, verb: str, name: str, progress: Progress) -> None:
        unit = helper_unit(verb, name)
        result = result_path(verb, name, self.results_dir)
        progress(f"asking the agent-unit helper: systemctl start {unit}")
        asked = time.time()
        done = self._systemctl("start", unit)
        outcome = _read_result(result, since=asked)  # an older file tells of another request
        if done.returncode == 0:
            steps = outcome.get("steps")
            for line in steps if isinstance(steps, list) else []:
                progress(f"helper: {line}")
            return
        reason = outcome.get("message") or done.stderr.strip() or f"exit {done.returncode}"
        if "Interactive authentication required" in str(reason) or "Access denied" in str(reason):
            reason = (
                f"{reason} (polkit did not let this user start {unit}: is the iris_runtime "
                "role's agent-unit helper installed?)"
            )
        raise ProvisionError(f"the agent-unit helper could not {verb} {name}: {reason}")

    def _systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self.systemctl, *args],
                capture_output=True,
                text=True,
                timeout=_TIMEOUT,
                check=False,
            )
        except FileNotFoundError:
            raise ProvisionError("systemctl not found: service mode needs systemd") from None
        except subprocess.TimeoutExpired:
            raise ProvisionError(f"systemctl {' '.join(args)} took over {_TIMEOUT:.0f} s") from None


def _read_result(path: Path, since: float) -> dict[str, object]:
    try:
        if path.stat().st_mtime < since - 1.0:
            return {}
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}

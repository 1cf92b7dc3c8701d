"""From ``IRIS_SANDBOX`` (``level`` or ``level:option``) to an opened, checked, probed sandbox.

Plugins register levels through ``register_sandboxes``: either a :class:`Level` (or any object
with ``open(spec) -> Sandbox``), or, as before levels had views and probes, an object with only
``wrap(argv) -> argv``, which runs the wrapped command on the host's workspace: unproven, so it
is refused unless ``IRIS_SANDBOX_UNPROVEN=1`` is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris_runtime.tools.sandbox.base import (
    Launch,
    RunSecrets,
    Sandbox,
    SandboxSpec,
    SandboxUnavailable,
)
from iris_runtime.tools.sandbox.probe import ProbeReport, problems, run_probe
from iris_runtime.tools.sandbox.view import host_view

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Level:
    """A registered level: ``open(spec)`` builds its sandbox (cheap, no subprocess)."""

    open: Callable[[SandboxSpec], Sandbox]


UNPROVEN_OPT_IN = "IRIS_SANDBOX_UNPROVEN"


class WrappedSandbox:
    """A plugin level that only wraps the command line (``wrap(argv) -> argv``): no view and no
    probe, so nothing shows its boundary. Refused unless ``IRIS_SANDBOX_UNPROVEN=1``; then it
    runs (with a warning) and its commands never get Iris's own API token."""

    isolated = False
    isolates_network = False
    unproven = True

    def __init__(
        self, level: str, wrapper: Any, workspace: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.level = level
        self._wrapper = wrapper
        self._env = dict(env or {})
        self.view = host_view(workspace)

    def check(self) -> None:
        if self._env.get(UNPROVEN_OPT_IN) != "1":
            raise SandboxUnavailable(
                f"plugin level {self.level!r} only wraps the command line (wrap()): it has no "
                "workspace view and no probe, so its commands and the file tools would reach "
                f"Iris's whole data dir, unproven. Set {UNPROVEN_OPT_IN}=1 to run it anyway, or "
                "register a full level (open(spec) -> Sandbox)"
            )
        log.warning(
            "sandbox %s is a wrap-only plugin level: its boundary is unproven (%s=1)",
            self.level,
            UNPROVEN_OPT_IN,
        )

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        return Launch(list(self._wrapper.wrap(list(argv))), Path(cwd), dict(env))


def split_level(configured: str) -> tuple[str, str | None]:
    """``"docker:web"`` → ``("docker", "web")``; ``"host"`` → ``("host", None)``."""
    level, sep, option = configured.partition(":")
    return level, (option if sep else None)


def open_sandbox(
    configured: str,
    levels: Mapping[str, Any],
    data_dir: Path,
    env: Mapping[str, str],
    run_secrets: RunSecrets | None = None,
) -> Sandbox:
    """The configured level, opened and checked (raises SandboxUnavailable with the reason)."""
    level, option = split_level(configured)
    registered = levels.get(level)
    if registered is None:
        names = ", ".join(sorted(levels)) or "none"
        raise SandboxUnavailable(f"sandbox level {level!r} is not installed (known: {names})")
    spec = SandboxSpec(level, option, data_dir, env, run_secrets)
    if hasattr(registered, "open"):
        sandbox: Sandbox = registered.open(spec)
    elif hasattr(registered, "wrap") and option is None:
        sandbox = WrappedSandbox(level, registered, data_dir, env)
    else:
        raise SandboxUnavailable(f"sandbox level {level!r} takes no option ({option!r})")
    sandbox.check()
    return sandbox


def prove(sandbox: Sandbox, data_dir: Path) -> ProbeReport | None:
    """Run the probe; raise SandboxUnavailable when it shows the host. A level that claims no
    boundary (host) has nothing to prove: no probe runs (``iris doctor --sandbox`` still shows
    what a command there sees)."""
    if not sandbox.isolated:
        return None
    report = run_probe(sandbox, data_dir)
    found = problems(report, sandbox, os.geteuid())
    if found:
        raise SandboxUnavailable(
            f"sandbox {sandbox.level!r} shows the host: {'; '.join(found)} ({report.summary()})"
        )
    log.info("sandbox %s proven: %s", sandbox.level, report.summary())
    return report

"""The ``host`` level: commands run as Iris's own user, in the data dir, with no boundary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from iris_runtime.tools.sandbox.base import Launch, SandboxSpec, WorkspaceView, no_option
from iris_runtime.tools.sandbox.view import host_view


class HostSandbox:
    name = "host"
    level = "host"
    isolated = False
    isolates_network = False

    def __init__(self, workspace: Path | None = None) -> None:
        self.view: WorkspaceView = host_view(workspace or Path.cwd())

    def check(self) -> None:
        return None

    def launch(self, argv: list[str], cwd: str, env: Mapping[str, str]) -> Launch:
        return Launch(list(argv), Path(cwd), dict(env))

    def wrap(self, argv: list[str]) -> list[str]:
        return argv


def open_host(spec: SandboxSpec) -> HostSandbox:
    no_option(spec)
    return HostSandbox(spec.data_dir)

"""A level that cannot run here says why, and nothing falls back to a weaker one."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris_runtime.tools.sandbox import SandboxSpec, SandboxUnavailable, open_sandbox
from iris_runtime.tools.sandbox.docker import DockerSandbox
from iris_runtime.tools.sandbox.gvisor import GvisorSandbox
from iris_runtime.tools.sandbox.levels import BUILT_IN_LEVELS
from iris_runtime.tools.sandbox.namespace import NamespaceSandbox


def _spec(tmp_path: Path, level: str, option: str | None = None) -> SandboxSpec:
    return SandboxSpec(level, option, tmp_path)


def test_missing_binaries_are_named(tmp_path: Path) -> None:
    for sandbox, words in (
        (NamespaceSandbox(_spec(tmp_path, "namespace"), None), "apt-get install bubblewrap"),
        (GvisorSandbox(_spec(tmp_path, "gvisor"), None), "apt-get install runsc"),
        (DockerSandbox(_spec(tmp_path, "docker", "box"), None), "docker client"),
    ):
        with pytest.raises(SandboxUnavailable, match=words):
            sandbox.check()


@pytest.mark.parametrize(
    ("configured", "words"),
    [
        ("nosuch", "'nosuch' is not installed"),
        ("host:x", "takes no option"),
        ("namespace:wifi", "unknown namespace option"),
        ("gvisor:tcg", "unknown gVisor platform"),
        ("docker", "docker:<container>"),
        ("firecracker:tap", "unknown firecracker option"),
        ("firecracker", "needs firecracker"),
    ],
)
def test_bad_or_unrunnable_levels_are_refused(tmp_path: Path, configured: str, words: str) -> None:
    with pytest.raises(SandboxUnavailable, match=words):
        open_sandbox(
            configured, BUILT_IN_LEVELS, tmp_path, {"IRIS_FIRECRACKER_BIN": "/nonexistent"}
        )

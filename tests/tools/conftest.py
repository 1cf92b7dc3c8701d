"""A ToolContext over a real workspace in tmp_path, recording upload_file calls."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from iris_runtime.engine.tools import ToolContext
from iris_runtime.tools.sandbox import HostSandbox


@pytest.fixture
def uploads() -> list[tuple[str, str | None]]:
    return []


@pytest.fixture
def ctx(tmp_path: Path, uploads: list[tuple[str, str | None]]) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(
        workspace=workspace,
        channel_dir=workspace / "chan",
        abort=threading.Event(),
        upload_file=lambda p, t: uploads.append((p, t)),
        timeout_seconds=5,
        output_max_chars=200,
        sandboxes={"host": HostSandbox()},
    )

"""The attach tool hands resolved paths to upload_file and refuses anything else."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from iris_runtime.engine.tools import ToolContext
from iris_runtime.tools.attach import AttachTool


def test_attach_workspace_file(ctx: ToolContext, uploads: list[tuple[str, str | None]]) -> None:
    (ctx.workspace / "report.pdf").write_bytes(b"%PDF")
    result = AttachTool().run({"path": "report.pdf", "title": "Report"}, ctx)
    assert result.text == "attached report.pdf"
    assert uploads == [(str((ctx.workspace / "report.pdf").resolve()), "Report")]


def test_attach_from_channel_dir_outside_workspace(
    ctx: ToolContext, tmp_path: Path, uploads: list[tuple[str, str | None]]
) -> None:
    channel = tmp_path / "channel"
    channel.mkdir()
    (channel / "out.log").write_text("log")
    separate = dataclasses.replace(ctx, channel_dir=channel)
    result = AttachTool().run({"path": str(channel / "out.log")}, separate)
    assert not result.is_error
    assert uploads == [(str((channel / "out.log").resolve()), None)]


def test_attach_refuses_missing_dir_and_outside(
    ctx: ToolContext, tmp_path: Path, uploads: list[tuple[str, str | None]]
) -> None:
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", ctx.workspace / "link")
    for path in ["missing.txt", ".", "../secret", str(tmp_path / "secret"), "link", "/etc/passwd"]:
        result = AttachTool().run({"path": path}, ctx)
        assert result.is_error, path
    assert uploads == []

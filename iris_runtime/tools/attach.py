"""The ``attach`` tool: send a file from the workspace or channel folder to the chat."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.errors import InvalidInput, IrisError
from iris_runtime.tools.sandbox.context import view_of
from iris_runtime.tools.sandbox.view import locate
from iris_runtime.tools.workspace import confine, read_confined

MAX_ATTACH_BYTES = 100 * 1024 * 1024


class AttachTool:
    name = "attach"
    kind = "other"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Send a file from the workspace (or the channel folder) to the user as an attachment."
    )

    def __init__(self) -> None:
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "title": {"type": "string", "description": "Optional title shown with the file."},
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path = _snapshot(ctx, args["path"])
            ctx.upload_file(str(path), args.get("title"))
        except (IrisError, OSError) as exc:
            return ToolResult(str(exc), is_error=True)
        return ToolResult(f"attached {path.name}")


def _snapshot(ctx: ToolContext, user_path: str) -> Path:
    """The file to upload. A file the sandboxed command can change is copied (opened without
    following a symlink) to a private snapshot first: the transport reads it later by path, and a
    swap in between must not send Iris's own files."""
    view = view_of(ctx)
    try:
        root, path = locate(view, user_path, write=False)
    except InvalidInput:
        # The channel folder (downloads, tool output) may sit outside the workspace.
        root, path = ctx.channel_dir, confine(ctx.channel_dir, user_path)
    data = read_confined(root, path, user_path, MAX_ATTACH_BYTES)
    if view.root.inside == str(view.root.host):
        return path  # the host level: no sandboxed command racing the upload
    folder = ctx.channel_dir / "outbox" / secrets.token_hex(8)
    folder.mkdir(mode=0o700, parents=True)
    snapshot = folder / path.name
    snapshot.write_bytes(data)
    return snapshot

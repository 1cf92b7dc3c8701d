"""The ``attach`` tool: send a file from the workspace or channel folder to the chat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.errors import InvalidInput, IrisError
from iris_runtime.tools.sandbox.context import view_of
from iris_runtime.tools.sandbox.view import resolve
from iris_runtime.tools.workspace import confine


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
            path = _confine_either(ctx, args["path"])
            if not path.is_file():
                raise InvalidInput(f"{args['path']}: no such file")
            ctx.upload_file(str(path), args.get("title"))
        except (IrisError, OSError) as exc:
            return ToolResult(str(exc), is_error=True)
        return ToolResult(f"attached {path.name}")


def _confine_either(ctx: ToolContext, user_path: str) -> Path:
    try:
        return resolve(view_of(ctx), user_path, write=False)
    except InvalidInput:
        # The channel folder (downloads, tool output) may sit outside the workspace.
        return confine(ctx.channel_dir, user_path)

"""The ``read``, ``write`` and ``edit`` tools: UTF-8 text files inside the workspace.

Writes go through a temp file in the target's directory and a rename so a crash or a full
disk never leaves a half-written file behind. Every open walks from the workspace root without
following a symlink (``workspace.read_confined``): a command racing the tools cannot
redirect them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.errors import InvalidInput
from iris_runtime.tools.sandbox.context import sandbox_of, view_of
from iris_runtime.tools.sandbox.view import locate, to_inside
from iris_runtime.tools.workspace import display, read_confined, write_confined

MAX_FILE_BYTES = 10 * 1024 * 1024
_NEW_FILE_MODE = 0o644


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    path = {"type": "string", "description": "File path, relative to the workspace."}
    return {
        "type": "object",
        "properties": {"path": path, **properties},
        "required": ["path", *required],
        "additionalProperties": False,
    }


class ReadTool:
    name = "read"
    kind = "read"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Read a UTF-8 text file from the workspace. Use offset (1-based line) and limit (lines) "
        "to read a large file in pieces."
    )

    def __init__(self) -> None:
        self.parameters = _schema(
            {
                "offset": {"type": "integer", "description": "First line to return (1-based)."},
                "limit": {"type": "integer", "description": "Maximum number of lines to return."},
            },
            [],
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        offset, limit = args.get("offset", 1), args.get("limit")
        if offset < 1 or (limit is not None and limit < 1):
            return ToolResult("offset and limit must be at least 1", is_error=True)
        try:
            text = _File.locate(ctx, args["path"], write=False).read().decode("utf-8", "replace")
        except (InvalidInput, OSError) as exc:
            return _error(exc)
        return _read_slice(_split_lines(text), offset, limit, ctx.output_max_chars)


class WriteTool:
    name = "write"
    kind = "edit"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Create or overwrite a text file in the workspace with the given content. Missing parent "
        "directories are created."
    )

    def __init__(self) -> None:
        self.parameters = _schema(
            {"content": {"type": "string", "description": "The full new content."}}, ["content"]
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        data = args["content"].encode("utf-8", errors="surrogatepass")
        try:
            target = _File.locate(ctx, args["path"], write=True)
            target.write(data)
        except (InvalidInput, OSError) as exc:
            return _error(exc)
        return ToolResult(f"wrote {len(data)} bytes to {target.shown()}")


class EditTool:
    name = "edit"
    kind = "edit"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Replace one exact occurrence of old_text with new_text in a workspace file. old_text "
        "must occur exactly once; include surrounding lines to make it unique."
    )

    def __init__(self) -> None:
        self.parameters = _schema(
            {
                "old_text": {"type": "string", "description": "Exact text to replace."},
                "new_text": {"type": "string", "description": "Replacement text."},
            },
            ["old_text", "new_text"],
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        old, new = args["old_text"], args["new_text"]
        if not old:
            return ToolResult("old_text must not be empty", is_error=True)
        try:
            target = _File.locate(ctx, args["path"], write=True)
            # Strict decoding: writing back a lossy decode would corrupt the file's other bytes.
            text = target.read().decode("utf-8")
            count = text.count(old)
            if count != 1:
                raise InvalidInput(_occurrence_problem(count))
            target.write(text.replace(old, new, 1).encode("utf-8", errors="surrogatepass"))
        except UnicodeDecodeError:
            return ToolResult(f"{args['path']} is not UTF-8 text; edit refused", is_error=True)
        except (InvalidInput, OSError) as exc:
            return _error(exc)
        return ToolResult(f"edited {target.shown()}")


@dataclass(frozen=True)
class _File:
    """A model-supplied path, checked once against the run's view (inside it, writable where
    asked), and every open of it confined to the folder it was checked against."""

    ctx: ToolContext
    user_path: str
    root: Path  # the folder the path is confined to
    path: Path  # resolved, under ``root``

    @classmethod
    def locate(cls, ctx: ToolContext, user_path: str, *, write: bool) -> _File:
        root, path = locate(view_of(ctx), user_path, write=write)
        return cls(ctx, user_path, root, path)

    def read(self) -> bytes:
        return read_confined(self.root, self.path, self.user_path, MAX_FILE_BYTES)

    def write(self, data: bytes) -> None:
        owner = _owner(self.ctx)
        write_confined(
            self.root, self.path, self.user_path, data, new_mode=_NEW_FILE_MODE, owner=owner
        )

    def shown(self) -> str:
        """A short name for messages, as the command sees it: relative to the workspace if
        inside."""
        view = view_of(self.ctx)
        shown = display(view.root.host, self.path)
        return to_inside(view, self.path) if shown == str(self.path) else shown


def _owner(ctx: ToolContext) -> int | None:
    """The uid the level's commands write as on the host, when it is not Iris's own (gVisor's
    and Docker's 10000): what the tools make is handed to it (root only can)."""
    uid: int | None = getattr(sandbox_of(ctx), "command_uid", None)
    return uid if uid is not None and os.geteuid() == 0 and uid != os.geteuid() else None


def _occurrence_problem(count: int) -> str:
    if count == 0:
        return "old_text occurs 0 times in the file; nothing changed"
    return f"old_text occurs {count} times in the file; add context to make it unique"


def _error(exc: Exception) -> ToolResult:
    return ToolResult(str(exc), is_error=True)


def _split_lines(text: str) -> list[str]:
    """Lines with their newlines, split on "\\n" only so numbers match grep, sed and wc."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _read_slice(lines: list[str], offset: int, limit: int | None, max_chars: int) -> ToolResult:
    if offset > max(len(lines), 1):
        return ToolResult(f"offset {offset} is past the end ({len(lines)} lines)", is_error=True)
    end = len(lines) if limit is None else min(len(lines), offset - 1 + limit)
    chosen: list[str] = []
    used = 0
    for line in lines[offset - 1 : end]:
        if chosen and used + len(line) > max_chars:
            break
        chosen.append(line)
        used += len(line)
    text = "".join(chosen)
    last = offset - 1 + len(chosen)
    if len(text) > max_chars:  # a single line longer than the whole budget
        return ToolResult(
            f"{text[:max_chars]}\n[line {offset} is longer than {max_chars} characters; "
            f"only its start is shown; use offset={offset + 1} for the next line]"
        )
    if last < len(lines):
        text += (
            f"\n[showing lines {offset}-{last} of {len(lines)}; "
            f"use offset={last + 1} to read further]"
        )
    return ToolResult(text)

"""Confining model-supplied paths to a directory the tool is allowed to touch."""

from __future__ import annotations

from pathlib import Path

from iris_runtime.errors import InvalidInput


def confine(workspace: Path, user_path: str) -> Path:
    """Resolve ``user_path`` (relative to ``workspace`` or absolute) and keep it inside.

    Symlinks are followed before the check, so a link inside the workspace that points elsewhere
    is refused rather than written through.
    """
    if "\0" in user_path:
        raise InvalidInput("path contains a NUL byte", code="outside_workspace")
    root = workspace.resolve()
    resolved = (root / user_path).resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput(
            f"path {user_path[:200]!r} is outside the workspace {root}", code="outside_workspace"
        )
    return resolved


def display(workspace: Path, path: Path) -> str:
    """A short name for messages: relative to the workspace when possible."""
    try:
        return str(path.relative_to(workspace.resolve()))
    except ValueError:
        return str(path)

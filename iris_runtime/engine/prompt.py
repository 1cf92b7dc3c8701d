"""The prompts: the system prompt (the transport's profile plus the agent's own identity, memory
and skills) and the user's message as the model sees it (with its attachments' paths).

Nothing platform-specific is written here; every such word comes from the profile.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.engine.filecache import FileCache
from iris_runtime.engine.skills import Skill
from iris_runtime.engine.transport import (
    ChannelInfo,
    TransportEvent,
    TransportPromptProfile,
    UserInfo,
)
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

MAX_IDENTITY_FILE_CHARS = 20_000


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return ""
    return text[:MAX_IDENTITY_FILE_CHARS].strip()


_identity_files: FileCache[str] = FileCache(_read, missing=lambda path: "")  # every message


def workspace_text(path: str) -> str:
    """A workspace text file the agent is given (at most 20,000 characters, stripped; '' when
    missing or unreadable), re-read only when it changes."""
    return _identity_files.get(path)


@functools.lru_cache(maxsize=64)
def _identity_paths(workspace: Path) -> tuple[str, str]:
    return (
        os.path.join(workspace, data_layout.CONSTITUTION_MD),
        os.path.join(workspace, data_layout.MEMORY_MD),
    )


@functools.lru_cache(maxsize=64)
def _skills_section(skills: tuple[Skill, ...]) -> str:  # the same skills message after message
    if not skills:
        return "No skills are installed."
    lines = [
        f"- {s.name}: {s.description or '(no description)'} ({s.path / 'SKILL.md'})" for s in skills
    ]
    return "Skills (read a skill's SKILL.md before using it):\n" + "\n".join(lines)


def build_system_prompt(
    profile: TransportPromptProfile,
    workspace: Path,
    *,
    skills: list[Skill],
    channels: list[ChannelInfo],
    users: list[UserInfo],
    extra_sections: list[str] | None = None,
) -> str:
    constitution_md, memory_md = _identity_paths(workspace)
    constitution = _identity_files.get(constitution_md)
    memory = _identity_files.get(memory_md)
    parts = [
        profile.identity_line,
        f"## Constitution\n{constitution}" if constitution else "",
        f"## Memory\n{memory}" if memory else "",
        f"## Formatting\n{profile.formatting_section}",
        f"Keep each reply under {profile.max_message_chars} characters where you can.",
        f"## Directory\n{profile.directory_section(channels, users)}",
        f"## Staying silent\n{profile.silent_note}",
        f"## Files\n{profile.attach_note}\nAttachments from the user arrive inside "
        f"<{profile.attachments_tag_name}> tags.",
        f"## Skills\n{_skills_section(tuple(skills))}",
        *(extra_sections or []),
        f"Your workspace is {workspace}.",
    ]
    return "\n\n".join(p for p in parts if p)


def user_prompt(
    event: TransportEvent,
    tag: str,
    data_dir: Path,
    show: Callable[[str], str] | None = None,
) -> str:
    """The message's text, its attachments' paths (as ``show`` gives them) in a ``tag`` block."""
    if not event.attachments:
        return event.text
    paths = "\n".join(_attachment_path(data_dir, a.local, show) for a in event.attachments)
    return f"{event.text}\n\n<{tag}>\n{paths}\n</{tag}>"


def _attachment_path(data_dir: Path, local: str, show: Callable[[str], str] | None) -> str:
    if show is None:
        return str(data_dir / local)
    try:
        return show(local)
    except (OSError, IrisError):
        log.warning("could not copy attachment %s into the sandbox's view", local)
        return str(data_dir / local)

"""Skills: folders holding a SKILL.md whose frontmatter names and describes the skill."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_SKILL_MD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path


def read_frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences (flat values only)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return out
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            out[key.strip()] = value.strip().strip("\"'")
    return {}  # no closing fence: not frontmatter


def load_skill(folder: Path) -> Skill | None:
    skill_md = folder / "SKILL.md"
    try:
        if skill_md.stat().st_size > MAX_SKILL_MD_BYTES:
            log.warning("skipping skill %s: SKILL.md is larger than 64 KiB", folder)
            return None
        meta = read_frontmatter(skill_md.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("skipping skill %s: %s", folder, exc)
        return None
    name = meta.get("name") or folder.name
    return Skill(name=name, description=meta.get("description", ""), path=folder)


def discover_skills(workspace: Path, extra: list[Path]) -> list[Skill]:
    """Skills in ``workspace/skills/*`` plus folders registered by plugins; first name wins."""
    folders = sorted(p for p in (workspace / "skills").glob("*") if p.is_dir()) + list(extra)
    seen: dict[str, Skill] = {}
    for folder in folders:
        skill = load_skill(folder)
        if skill and skill.name not in seen:
            seen[skill.name] = skill
    return list(seen.values())

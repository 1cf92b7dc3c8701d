"""Skills: folders holding a SKILL.md whose frontmatter names and describes the skill.

The frontmatter may also declare ``secrets: [NAME, ...]``: the secret names the skill's scripts
fetch from the broker. Spawning an agent with a skill must put those names on the agent's
allow-list (:func:`secrets_for_skills`), or the skill fails with a 403 the first time it runs.

Frontmatter was read as flat ``key: value`` lines before it was read as YAML, and skills in the
wild rely on that: ``description: Posts to #general`` or ``description: *bold* claims`` mean
what they say, while YAML would cut the first at its comment and reject the second. So a value
written on the key's own line is taken verbatim, and YAML only supplies values that need it:
lists, and text continued on the following lines.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.engine.filecache import FileCache
from iris_runtime.secrets.backend import SECRET_NAME_RE

log = logging.getLogger(__name__)

MAX_SKILL_MD_BYTES = 64 * 1024
# How many bad ``secrets`` entries one warning quotes, and how much of each: enough to find
# the typo, not enough for a hostile SKILL.md to flood the log.
MAX_REPORTED_ENTRIES = 5
MAX_REPORTED_CHARS = 60


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    secrets: tuple[str, ...] = ()


def _frontmatter_lines(text: str) -> list[str] | None:
    """The lines between the leading ``---`` fences, or None when there is no frontmatter."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for end, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return lines[1:end]
    return None  # no closing fence: not frontmatter


def read_frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences (flat values only)."""
    out: dict[str, str] = {}
    for line in _frontmatter_lines(text) or []:
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            out[key.strip()] = value.strip().strip("\"'")
    return out


def read_frontmatter_yaml(text: str) -> dict[str, object]:
    """The frontmatter as YAML. When the whole block is not valid YAML (often a flat-style
    description), each top-level key is parsed on its own, so one odd line does not hide the
    others; keys whose own text is not YAML are left out."""
    lines = _frontmatter_lines(text)
    if lines is None:
        return {}
    whole = _yaml_mapping("\n".join(lines))
    if whole is not None:
        return whole
    out: dict[str, object] = {}
    for entry in _top_level_entries(lines):
        out.update(_yaml_mapping("\n".join(entry)) or {})
    return out


def _top_level_entries(lines: list[str]) -> list[list[str]]:
    """Lines grouped per top-level key: a line at column 0 opens an entry; indented, blank and
    ``- item`` lines belong to the entry above them."""
    entries: list[list[str]] = []
    for line in lines:
        continues = line[:1] in {"", " ", "\t"} or line.startswith("-")
        if entries and continues:
            entries[-1].append(line)
        else:
            entries.append([line])
    return entries


def _yaml_mapping(source: str) -> dict[str, object] | None:
    import yaml  # on first use: only frontmatter the simple reader cannot take needs it

    try:
        parsed = yaml.safe_load(source)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    return {key: value for key, value in parsed.items() if isinstance(key, str)}


def _text_field(key: str, flat: dict[str, str], parsed: dict[str, object]) -> str:
    value = flat.get(key, "")
    if value and not value.startswith(("|", ">")):
        return value  # written on the key's line: verbatim, as it always was
    continued = parsed.get(key)
    return continued.strip() if isinstance(continued, str) else value


def _describe(entry: object) -> str:
    """A bad entry as a log may show it: escaped, short, and never a deep structure's repr."""
    if isinstance(entry, str):
        shown = repr(entry[:MAX_REPORTED_CHARS])
        return shown + "..." if len(entry) > MAX_REPORTED_CHARS else shown
    if entry is None or isinstance(entry, bool | int | float):
        return repr(entry)
    return f"a {type(entry).__name__}"


def _secret_names(skill: str, declared: object) -> tuple[str, ...]:
    """The valid names of a ``secrets`` declaration, in order; a warning for the rest."""
    if declared is None:
        return ()
    if not isinstance(declared, list):
        log.warning(
            "skill %r: secrets must be a list of names (secrets: [NAME, ...]), not %s; "
            "the skill gets no secrets",
            skill,
            _describe(declared),
        )
        return ()
    good: dict[str, None] = {}  # ordered and O(1) to check: a long list stays cheap
    bad: list[object] = []
    for entry in declared:
        if isinstance(entry, str) and SECRET_NAME_RE.fullmatch(entry):
            good.setdefault(entry, None)
        else:
            bad.append(entry)
    if bad:
        shown = ", ".join(_describe(entry) for entry in bad[:MAX_REPORTED_ENTRIES])
        more = (
            f" and {len(bad) - MAX_REPORTED_ENTRIES} more"
            if len(bad) > MAX_REPORTED_ENTRIES
            else ""
        )
        log.warning(
            "skill %r: ignoring invalid secrets entries %s%s (a name is 1-128 letters, digits, "
            "'_', '.', '-', starting with a letter or '_')",
            skill,
            shown,
            more,
        )
    return tuple(good)


def load_skill(folder: Path) -> Skill | None:
    skill_md = folder / "SKILL.md"
    try:
        if skill_md.stat().st_size > MAX_SKILL_MD_BYTES:
            log.warning("skipping skill %s: SKILL.md is larger than 64 KiB", folder)
            return None
        text = skill_md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("skipping skill %s: %s", folder, exc)
        return None
    flat = read_frontmatter(text)
    parsed = read_frontmatter_yaml(text)
    name = _text_field("name", flat, parsed) or folder.name
    if "secrets" in flat and "secrets" not in parsed:
        log.warning("skill %r: its secrets line is not valid YAML; the skill gets no secrets", name)
    return Skill(
        name=name,
        description=_text_field("description", flat, parsed),
        path=folder,
        secrets=_secret_names(name, parsed.get("secrets")),
    )


def _subfolders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_dir())


def _skill_of(skill_md: str) -> Skill | None:
    return load_skill(Path(skill_md).parent)


@functools.lru_cache(maxsize=1024)
def _joined(folder: Path, name: str) -> str:
    # A pathlib join per skill per message was most of what the cache left.
    return os.path.join(folder, name)


# A run lists the skills on every message; these keep it to a few stats (see filecache).
_listings: FileCache[list[Path]] = FileCache(
    lambda folder: _subfolders(Path(folder)), missing=lambda folder: []
)
_skills: FileCache[Skill | None] = FileCache(_skill_of, missing=_skill_of)


def discover_skills(workspace: Path, extra: list[Path]) -> list[Skill]:
    """Skills in ``workspace/skills/*`` plus folders registered by plugins; first name wins."""
    folders = [*_listings.get(_joined(workspace, data_layout.SKILLS_DIR)), *extra]
    seen: dict[str, Skill] = {}
    for folder in folders:
        skill = _skills.get(_joined(folder, "SKILL.md"))
        if skill and skill.name not in seen:
            seen[skill.name] = skill
    return list(seen.values())


def secrets_for_skills(skills: Iterable[Skill | Path]) -> list[str]:
    """Every secret name the given skills declare, first-seen order, each once: the allow-list
    an agent needs to run them. A path may be a skill folder or its SKILL.md; one that does not
    load contributes nothing (``load_skill`` has logged why)."""
    names: dict[str, None] = {}
    for item in skills:
        skill = item if isinstance(item, Skill) else _load_path(item)
        for name in skill.secrets if skill else ():
            names.setdefault(name, None)
    return list(names)


def _load_path(path: Path) -> Skill | None:
    return load_skill(path.parent if path.name == "SKILL.md" else path)

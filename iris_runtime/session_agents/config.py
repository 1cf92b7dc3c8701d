"""``session-agents.json``: the in-process agent ids and the sub-agent settings (spec 001).

The file is optional; without it there is one agent, ``main`` (Iris itself, whose folder is the
workspace). It is strict: an unknown key, a wrong type, an unknown model or agent id rejects the
whole file, because half of an operator's intent is worse than none. A rejected file is logged
and shown by ``iris doctor``; Iris keeps running on the defaults. The file is read again when it
changes (one ``stat`` per use), so no restart is needed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.engine.provider import THINKING_LEVELS

MAIN = "main"
ANY_AGENT = "*"
DEFAULT_MAX_CONCURRENT = 8
DEFAULT_ARCHIVE_MINUTES = 60.0
MAX_CONCURRENT_LIMIT = 64
MAX_ARCHIVE_MINUTES = 10 * 365 * 24 * 60
_AGENT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# The tools a sub-agent never gets, whatever the policy says (spec 001: no nested fan-out).
SESSION_TOOLS = frozenset({"sessions_spawn", "sessions_list", "sessions_history", "sessions_send"})


class ConfigInvalid(Exception):
    """The file breaks a rule; the message names the key (``agents.list[1].model``)."""


@dataclass(frozen=True)
class ToolPolicy:
    """``deny`` wins; when ``allow`` is set, only those tools are given."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()

    def permits(self, name: str) -> bool:
        if name in self.deny:
            return False
        return self.allow is None or name in self.allow


@dataclass(frozen=True)
class AgentEntry:
    id: str
    directory: Path  # AGENTS.md, TOOLS.md and auth-profiles.json live here
    model: str = ""
    thinking: str = ""
    allow_agents: tuple[str, ...] = ()  # ids it may name in sessions_spawn (its own always)
    subagent_model: str = ""  # the model of sub-agents spawned under this id
    tools: ToolPolicy = field(default_factory=ToolPolicy)


@dataclass(frozen=True)
class SessionAgentsConfig:
    agents: Mapping[str, AgentEntry]  # always holds ``main``
    default_model: str = ""  # agents.defaults.subagents.model
    max_concurrent: int | None = None  # None: IRIS_LANE_SUBAGENT decides
    archive_after_minutes: float = DEFAULT_ARCHIVE_MINUTES
    tools: ToolPolicy = field(default_factory=ToolPolicy)  # tools.subagents.tools
    problem: str | None = None  # why the file was rejected (the rest is then the defaults)

    def allowed_for(self, caller: str) -> list[str]:
        """The agent ids ``caller`` may spawn under, its own first."""
        entry = self.agents.get(caller)
        named = entry.allow_agents if entry else ()
        others = sorted(self.agents) if ANY_AGENT in named else [a for a in named if a != caller]
        return [caller, *(a for a in others if a != caller and a in self.agents)]


def config_path(data_dir: Path) -> Path:
    return data_dir / data_layout.SESSION_AGENTS_JSON


def defaults(data_dir: Path, problem: str | None = None) -> SessionAgentsConfig:
    return SessionAgentsConfig({MAIN: AgentEntry(MAIN, data_dir)}, problem=problem)


def load(data_dir: Path, known_model: Callable[[str], bool]) -> SessionAgentsConfig:
    """The configuration in force: the file's, or the defaults (with ``problem`` set when the
    file exists but is rejected)."""
    path = config_path(data_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return defaults(data_dir)
    except (OSError, UnicodeDecodeError) as exc:
        return defaults(data_dir, f"{path}: cannot be read: {exc}")
    try:
        return parse(json.loads(text), data_dir, known_model)
    except json.JSONDecodeError as exc:
        return defaults(data_dir, f"{path}: not valid JSON: {exc}")
    except ConfigInvalid as exc:
        return defaults(data_dir, f"{path}: {exc}")


def parse(raw: Any, data_dir: Path, known_model: Callable[[str], bool]) -> SessionAgentsConfig:
    top = _object(raw, "the file", {"agents", "tools"})
    agents = _object(top.get("agents", {}), "agents", {"defaults", "list"})
    sub_defaults = _object(
        _object(agents.get("defaults", {}), "agents.defaults", {"subagents"}).get("subagents", {}),
        "agents.defaults.subagents",
        {"model", "maxConcurrent", "archiveAfterMinutes"},
    )
    entries = _entries(agents.get("list", []), data_dir, known_model)
    _check_allow_lists(entries)
    tools = _object(top.get("tools", {}), "tools", {"subagents"})
    policy = _object(tools.get("subagents", {}), "tools.subagents", {"tools"}).get("tools", {})
    return SessionAgentsConfig(
        entries,
        default_model=_model(sub_defaults, "agents.defaults.subagents", known_model),
        max_concurrent=_max_concurrent(sub_defaults),
        archive_after_minutes=_archive_minutes(sub_defaults),
        tools=_policy(policy, "tools.subagents.tools"),
    )


def _entries(raw: Any, data_dir: Path, known_model: Callable[[str], bool]) -> dict[str, AgentEntry]:
    if not isinstance(raw, list):
        raise ConfigInvalid("agents.list must be a list")
    entries = {MAIN: AgentEntry(MAIN, data_dir)}
    seen: set[str] = set()
    for index, item in enumerate(raw):
        where = f"agents.list[{index}]"
        entry = _entry(item, where, data_dir, known_model)
        if entry.id in seen:
            raise ConfigInvalid(f"{where}.id: {entry.id!r} is listed twice")
        seen.add(entry.id)
        entries[entry.id] = entry
    return entries


_ENTRY_KEYS = {"id", "agentDir", "model", "thinking", "subagents", "tools"}


def _entry(raw: Any, where: str, data_dir: Path, known_model: Callable[[str], bool]) -> AgentEntry:
    item = _object(raw, where, _ENTRY_KEYS)
    agent_id = item.get("id")
    if not isinstance(agent_id, str) or not _AGENT_ID.fullmatch(agent_id):
        raise ConfigInvalid(
            f"{where}.id must be a lowercase id (letters, digits, _ and -, at most 64)"
        )
    sub = _object(item.get("subagents", {}), f"{where}.subagents", {"allowAgents", "model"})
    thinking = item.get("thinking", "")
    if not isinstance(thinking, str) or (thinking and thinking not in THINKING_LEVELS):
        raise ConfigInvalid(f"{where}.thinking must be one of {', '.join(THINKING_LEVELS)}")
    return AgentEntry(
        agent_id,
        _directory(item.get("agentDir"), agent_id, where, data_dir),
        model=_model(item, where, known_model),
        thinking=thinking,
        allow_agents=tuple(_names(sub.get("allowAgents", []), f"{where}.subagents.allowAgents")),
        subagent_model=_model(sub, f"{where}.subagents", known_model),
        tools=_policy(item.get("tools", {}), f"{where}.tools"),
    )


def _directory(raw: Any, agent_id: str, where: str, data_dir: Path) -> Path:
    if agent_id == MAIN:
        if raw is not None:
            raise ConfigInvalid(f"{where}.agentDir: main's folder is the workspace")
        return data_dir
    if raw is None:
        return data_dir / data_layout.SESSION_AGENTS_DIR / agent_id
    if not isinstance(raw, str) or not raw:
        raise ConfigInvalid(f"{where}.agentDir must be a path")
    path = Path(raw)
    if not path.is_absolute():
        if ".." in path.parts:
            raise ConfigInvalid(f"{where}.agentDir: a relative path may not contain '..'")
        path = data_dir / path
    return path


def _check_allow_lists(entries: Mapping[str, AgentEntry]) -> None:
    for entry in entries.values():
        unknown = [a for a in entry.allow_agents if a != ANY_AGENT and a not in entries]
        if unknown:
            raise ConfigInvalid(
                f"agent {entry.id!r}: subagents.allowAgents names unknown agent id(s) "
                f"{', '.join(unknown)} (known: {', '.join(sorted(entries))})"
            )


def _model(section: Mapping[str, Any], where: str, known_model: Callable[[str], bool]) -> str:
    model = section.get("model", "")
    if not isinstance(model, str):
        raise ConfigInvalid(f"{where}.model must be a string")
    if model and not known_model(model):
        raise ConfigInvalid(f"{where}.model: {model!r} is not in the models table")
    return model


def _max_concurrent(section: Mapping[str, Any]) -> int | None:
    value = section.get("maxConcurrent")
    if value is None:
        return None
    if not _is_int(value) or not 1 <= value <= MAX_CONCURRENT_LIMIT:
        raise ConfigInvalid(
            f"agents.defaults.subagents.maxConcurrent must be an integer from 1 to "
            f"{MAX_CONCURRENT_LIMIT}"
        )
    return int(value)


def _archive_minutes(section: Mapping[str, Any]) -> float:
    value = section.get("archiveAfterMinutes", DEFAULT_ARCHIVE_MINUTES)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 <= value <= MAX_ARCHIVE_MINUTES:
        raise ConfigInvalid(
            "agents.defaults.subagents.archiveAfterMinutes must be a number of minutes from 0 "
            f"(never archive) to {MAX_ARCHIVE_MINUTES} (ten years)"
        )
    return float(value)


def _policy(raw: Any, where: str) -> ToolPolicy:
    section = _object(raw, where, {"allow", "deny"})
    allow = section.get("allow")
    return ToolPolicy(
        None if allow is None else frozenset(_names(allow, f"{where}.allow")),
        frozenset(_names(section.get("deny", []), f"{where}.deny")),
    )


def _names(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        raise ConfigInvalid(f"{where} must be a list of names")
    return list(raw)


def _object(raw: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigInvalid(f"{where} must be an object")
    unknown = sorted(set(raw) - keys)
    if unknown:
        raise ConfigInvalid(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(keys))})"
        )
    return raw


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

"""Finding one of a chat's sub-agents by what people and the model call it (``#2``, ``2``, a run
id or its prefix, the session key, the label), and reading its transcript."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from iris_runtime.engine.sessions import SessionStore
from iris_runtime.session_agents.store import RunRecord

MAX_SHOWN_CHARS = 1500
_NUMBER = re.compile(r"[0-9]{1,9}")  # ASCII digits only: "²".isdigit() is True


class NotFoundHere(Exception):
    """No such sub-agent in this chat; the message says what there is."""


def find_spawn(spawns: Sequence[RunRecord], ident: str) -> RunRecord:
    """The one of a chat's ``spawns`` (in spawn order) that ``ident`` names."""
    wanted = ident.strip()
    number = wanted[1:] if wanted.startswith("#") else wanted
    matches = []
    if _NUMBER.fullmatch(number):
        matches = [s for s in spawns if s.seq == int(number)]
    matches = matches or [s for s in spawns if wanted in (s.session_key, s.run_id)]
    matches = matches or [s for s in spawns if wanted and wanted == s.label]
    if not matches and len(wanted) >= 4:
        matches = [s for s in spawns if s.run_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NotFoundHere(f"{ident!r} names {len(matches)} sub-agents here; use #number")
    if not spawns:
        raise NotFoundHere("no sub-agents were spawned in this chat")
    raise NotFoundHere(
        f"no sub-agent {ident!r} in this chat (there are #1 to #{spawns[-1].seq}; "
        "/subagents list shows them)"
    )


def transcript_lines(
    sessions: SessionStore, spawn: RunRecord, limit: int, tools: bool
) -> list[dict[str, Any]]:
    """The last ``limit`` entries of the sub-agent's transcript: messages, and with ``tools``
    its tool calls (an archived session is read from its renamed file)."""
    entries = sessions.entries(spawn.child_channel)
    if not entries and spawn.archived is not None:
        entries = _archived_entries(sessions, spawn)
    shown: list[dict[str, Any]] = []
    for entry in entries:
        kind = entry.get("type")
        if kind == "message" and isinstance(entry.get("text"), str):
            shown.append({"role": entry.get("role"), "text": _clip(entry["text"])})
        elif kind == "tool" and tools:
            shown.append(_tool_line(entry))
    return shown[-limit:]


def _tool_line(entry: dict[str, Any]) -> dict[str, Any]:
    if entry.get("phase") == "start":
        args = json.dumps(entry.get("args", {}), ensure_ascii=False)
        return {"role": "tool", "name": entry.get("name"), "args": _clip(args)}
    return {
        "role": "tool",
        "name": entry.get("name"),
        "result": _clip(str(entry.get("result", ""))),
        "isError": bool(entry.get("isError")),
    }


def _archived_entries(sessions: SessionStore, spawn: RunRecord) -> list[dict[str, Any]]:
    folder = sessions.log_path(spawn.child_channel).parent
    archived = sorted(folder.glob("log.jsonl.deleted.*"))
    if not archived:
        return []
    out: list[dict[str, Any]] = []
    for raw in archived[-1].read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 1] + "…"

"""Conversations as the browser sees them, rebuilt from each channel's ``log.jsonl``.

The log is the engine's: user messages (logged when their run starts), replies (when it ends),
and markers. This transport adds ``webui_tool`` (a finished tool card) and ``webui_file`` (a
file the agent attached), which belong to the reply that follows them; ``webui_post`` (a message
posted to the channel from outside a run, e.g. an escalation); and ``webui_subagent`` (a step of
a background sub-agent: one card per run id, placed after the reply of the run that spawned it;
see :mod:`iris_webui.subagents`). An assistant message the engine logged outside a run
(``posted: true``: a sub-agent's announce) is shown as it is, with no run status and none of a
run's cards. Nothing else is kept: reloading a page shows exactly what the log holds.

The log is read as untrusted: a field of the wrong type is ignored (never a 500), cards and
files left without a reply (a run cut off by a crash) close into an interrupted turn before the
next user message, and trailing ones are "running" only while the engine runs the channel.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from iris_runtime.engine.sessions import LOG_NAME, SessionStore
from iris_webui.profile import CHANNEL_PREFIX
from iris_webui.subagents import MARKER as SUBAGENT_MARKER
from iris_webui.subagents import subagent_card
from iris_webui.uploads import attachment_name, file_url, session_of

log = logging.getLogger(__name__)

TITLE_MAX_CHARS = 60
LOGGED_ID = "logged-"  # ids of messages the engine logged outside a run (announces)
MAX_SESSIONS = 200


def title_of(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1] + "…"


# A conversation's title is its first user message, and logs are append-only (a reset writes a
# marker, deletes nothing): once found it never changes, so listing the sessions (on every run
# and every page load) reads each log once rather than every time.
_TITLE_CACHE_MAX = 4096
_titles: dict[Path, str] = {}


def _first_user_text(path: Path) -> str:
    cached = _titles.get(path)
    if cached is not None:
        return cached
    text = _read_first_user_text(path)
    if text:
        if len(_titles) >= _TITLE_CACHE_MAX:
            _titles.clear()
        _titles[path] = text
    return text


def _read_first_user_text(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for raw in handle:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if (
                    isinstance(entry, dict)
                    and entry.get("type") == "message"
                    and entry.get("role") == "user"
                    and isinstance(entry.get("text"), str)
                ):
                    return str(entry["text"])
    except OSError:
        pass
    return ""


def list_sessions(data_dir: Path) -> list[dict[str, Any]]:
    """Every browser conversation, newest first: ``{"id", "title", "updated"}``."""
    found: list[dict[str, Any]] = []
    try:
        folders = [p for p in data_dir.iterdir() if p.name.startswith(CHANNEL_PREFIX)]
    except OSError:
        return []
    for folder in folders:
        session = session_of(folder.name)
        if session is None or not folder.is_dir():
            continue
        log_path = folder / LOG_NAME
        try:
            updated = (log_path if log_path.exists() else folder).stat().st_mtime
        except OSError:
            continue
        found.append(
            {"id": session, "title": title_of(_first_user_text(log_path)), "updated": updated}
        )
    found.sort(key=lambda s: s["updated"], reverse=True)
    return found[:MAX_SESSIONS]


def _files_of(channel: str, entry: dict[str, Any]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    attachments = entry.get("attachments")
    if not isinstance(attachments, list):
        return out
    for local in attachments:
        if not isinstance(local, str):
            continue
        owner, _, relative = local.partition("/")
        if owner == channel and relative:
            out.append(
                {
                    "name": attachment_name(relative.rsplit("/", 1)[-1]),
                    "url": file_url(channel, relative),
                }
            )
    return out


def _cut_off(
    tools: list[dict[str, Any]], files: list[dict[str, str]], status: str
) -> dict[str, Any]:
    """A turn with cards or files but no reply (yet)."""
    return {"role": "assistant", "text": "", "ts": None, "tools": tools, "files": files,
            "status": status}  # fmt: skip


def is_logged_post(entry: dict[str, Any]) -> bool:
    """An assistant message the engine logged itself, outside a run (``posted``): a sub-agent's
    announce. The transport only showed it; it never carries a run's tools or status."""
    return (
        entry.get("type") == "message"
        and entry.get("role") == "assistant"
        and entry.get("posted") is True
    )


def logged_post_id(entry: dict[str, Any], index: int) -> str:
    """The id of a logged post, the same live (``post`` frame) and in the history: from its
    announce key when it has one, else from its place in the log."""
    key = entry.get("announce")
    if isinstance(key, str) and key and len(key) <= 200:
        return f"{LOGGED_ID}{key}"
    return f"{LOGGED_ID}{index}"


def conversation(
    sessions: SessionStore, channel: str, *, running: bool = False
) -> list[dict[str, Any]]:
    """``[{"role","text","ts","tools","files"}]`` in order (plus ``"status"`` on replies).
    ``running``: the engine runs the channel now, so trailing cards belong to a live run.

    Sub-agent cards are items of their own (``{"role": "subagent", "ts", "card"}``), placed
    where they appeared, except that one spawned during a run goes after that run's reply (as
    the page shows it live: after the run's turn); later markers update a card in place."""
    messages: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    files: list[dict[str, str]] = []
    posts: dict[str, dict[str, Any]] = {}
    cards: dict[str, dict[str, Any]] = {}  # run id -> its card (already placed or pending)
    spawned: list[dict[str, Any]] = []  # cards waiting for the reply of the run they came in
    in_run = False  # a user message is logged when its run starts, the reply when it ends
    for index, entry in enumerate(sessions.entries(channel)):
        kind = entry.get("type")
        ts = entry.get("ts")
        if not isinstance(ts, (str, int, float)) or isinstance(ts, bool):
            ts = None
        if kind == "webui_tool" and isinstance(entry.get("card"), dict):
            tools.append(entry["card"])
        elif kind == "webui_file" and isinstance(entry.get("path"), str):
            name = entry.get("name")
            files.append(
                {
                    "name": name if isinstance(name, str) else "",
                    "url": file_url(channel, entry["path"]),
                }
            )
        elif kind == SUBAGENT_MARKER:
            card = subagent_card(entry.get("card"))
            if card is None:
                continue
            known = cards.get(card["runId"])
            if known is not None:  # a later step: the card changes in place
                known.update(card)
                continue
            cards[card["runId"]] = card
            (spawned if in_run else messages).append({"role": "subagent", "ts": ts, "card": card})
        elif kind == "webui_post" and isinstance(entry.get("text"), str):
            post_id = str(entry["id"]) if isinstance(entry.get("id"), str) else ""
            if post_id in posts:  # an update: the message changes in place
                posts[post_id]["text"] = entry["text"]
                continue
            message = {
                "role": "assistant",
                "text": entry["text"],
                "ts": ts,
                "tools": [],
                "files": [],
                "id": post_id,
            }
            posts[post_id] = message
            messages.append(message)
        elif is_logged_post(entry):
            text = entry.get("text")
            if not isinstance(text, str) or not text:
                continue
            messages.append(
                {
                    "role": "assistant",
                    "text": text,
                    "ts": ts,
                    "tools": [],
                    "files": [],
                    "id": logged_post_id(entry, index),
                    "posted": True,
                    **({"agent": entry["agent"]} if isinstance(entry.get("agent"), str) else {}),
                }
            )
        # (A tuple, not a set: a hostile unhashable role, a list, must not raise.)
        elif kind == "message" and entry.get("role") in ("user", "assistant"):
            text = entry.get("text") if isinstance(entry.get("text"), str) else ""
            if entry["role"] == "user":
                if tools or files:  # the run before never logged its reply: it was cut off
                    messages.append(_cut_off(tools, files, "error"))
                    tools, files = [], []
                messages.extend(spawned)
                spawned, in_run = [], True
                messages.append(
                    {
                        "role": "user",
                        "text": text,
                        "ts": ts,
                        "tools": [],
                        "files": _files_of(channel, entry),
                    }
                )
                continue
            if text or tools or files:  # (else a silent reply)
                messages.append(
                    {
                        "role": "assistant",
                        "text": text,
                        "ts": ts,
                        "tools": tools,
                        "files": files,
                        "status": _status(entry.get("status")),
                        **(
                            {"agent": entry["agent"]} if isinstance(entry.get("agent"), str) else {}
                        ),
                    }
                )
            tools, files = [], []
            messages.extend(spawned)
            spawned, in_run = [], False
    if tools or files:  # a run still going (or cut off): show what it did so far
        messages.append(_cut_off(tools, files, "running" if running else "error"))
    messages.extend(spawned)
    return messages


def _status(status: object) -> str:
    if status == "done":
        return "completed"
    if status == "stopped":
        return "stopped"
    return "error"

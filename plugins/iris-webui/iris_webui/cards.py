"""A tool call as a card: the ``tool`` frame (spec 004, "Tool cards").

The card is chosen by the call's kind (from the engine's ToolEvent) and filled from its input.
Its subtitle is the input's ``description``, ``file_path``, ``pattern`` or ``url``; failing
those, ``path`` or ``command`` (what our own tools take); failing those, the title. One card per
call id: the ``end`` frame repeats the input, so a browser that missed the start still draws it.

Secrets are blanked out of every card before it is sent or logged (``[redacted]``): a command
may print the internal API token (tools see ``IRIS_API_TOKEN``, for the secret broker) or any
credential it got hold of, and the card would otherwise carry it to the browser and the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from iris_runtime.engine.transport import ToolEvent

RESULT_MAX_BYTES = 4096
INPUT_VALUE_MAX_CHARS = 4096
SUBTITLE_MAX_CHARS = 200
SUBTITLE_KEYS = ("description", "file_path", "pattern", "url", "path", "command")
REDACTED = "[redacted]"
TITLES = {
    "bash": "Run a command",
    "read": "Read a file",
    "write": "Write a file",
    "edit": "Edit a file",
    "attach": "Attach a file",
    "call_agent": "Ask a sub-agent",
}


def truncate_bytes(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes (a cut character is dropped), marked when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "…"


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > INPUT_VALUE_MAX_CHARS:
        return value[:INPUT_VALUE_MAX_CHARS] + "…"
    if isinstance(value, dict):
        return {str(k): _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value[:100]]
    return value


def redact(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` (strings, inside lists and dicts too, keys included) without ``secrets``."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {redact(str(k), secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


def title_of(event: ToolEvent) -> str:
    if event.name == "call_agent" and isinstance(event.args.get("agent"), str):
        return f"Ask {event.args['agent'][:60]}"
    return TITLES.get(event.name, event.name)


def subtitle_of(args: dict[str, Any], title: str) -> str:
    for key in SUBTITLE_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            line = " ".join(value.split())
            return line if len(line) <= SUBTITLE_MAX_CHARS else line[: SUBTITLE_MAX_CHARS - 1] + "…"
    return title


def tool_frame(event: ToolEvent, secrets: Sequence[str] = ()) -> dict[str, Any]:
    # Redacted before truncation too: a cut must not leave the head of a secret behind.
    title = title_of(event)
    args = redact(event.args, secrets)
    result = None if event.result is None else redact(event.result, secrets)
    frame: dict[str, Any] = {
        "type": "tool",
        "id": event.call_id,
        "phase": event.phase,
        "name": event.name,
        "kind": event.kind,
        "title": title,
        "subtitle": subtitle_of(args, title),
        "input": _clip(args),
        "result": None if result is None else truncate_bytes(result, RESULT_MAX_BYTES),
        "is_error": event.is_error,
    }
    return cast(
        dict[str, Any], redact(frame, secrets)
    )  # the title (an agent's name) and the id, for completeness

"""Background sub-agents of a conversation as live cards (spec 001, "Seen where people look").

The engine tells the transport about a sub-agent spawned from a conversation, and about each
later step of it, with ``Engine.notify`` (``ChannelEventSink.on_channel_event``). Each event
becomes a ``subagent`` frame for the conversation's sockets, and a ``webui_subagent`` marker in
its log, so a reloaded page (or one that reconnects) draws the same cards. The browser keeps one
card per ``runId`` and updates it in place.

The frame: ``{"type": "subagent", "runId": str, "phase"?: str, "status"?: str, "index"?: int,
"label"?: str, "agentId"?: str, "sessionKey"?: str, "sessionId"?: str, "createdAt"?: float|null,
"startedAt"?: float|null, "endedAt"?: float|null, "runtimeSeconds"?: float|null, "serverTime":
float}`` (times in epoch seconds; ``serverTime`` lets the page count a running card's runtime on
the server's clock). The history item: ``{"role": "subagent", "ts", "card": {the same fields
but serverTime}}``.

Events come from inside Iris, markers from a log read as untrusted: both go through
:func:`subagent_card`, which keeps only the known fields of the right type (unknown ones are
dropped, so newer engines can add fields) and bounds every string.
"""

from __future__ import annotations

from typing import Any

MARKER = "webui_subagent"
FRAME_TYPE = "subagent"
TEXT_FIELDS = ("phase", "status", "sessionKey", "sessionId", "label", "agentId")
TIME_FIELDS = ("createdAt", "startedAt", "endedAt", "runtimeSeconds")
MAX_ID_CHARS = 200
MAX_TEXT_CHARS = 200


def _clip(value: str) -> str:
    line = " ".join(value.split())
    return line if len(line) <= MAX_TEXT_CHARS else line[: MAX_TEXT_CHARS - 1] + "…"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def subagent_card(event: Any) -> dict[str, Any] | None:
    """The card fields of a sub-agent event (or marker); None without a usable ``runId``.

    Fields absent from the event stay absent (a later event updates only what it carries); a
    time given as ``null`` is kept as ``None`` (not started yet, not ended yet)."""
    if not isinstance(event, dict):
        return None
    run_id = event.get("runId")
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > MAX_ID_CHARS:
        return None
    card: dict[str, Any] = {"runId": run_id}
    for key in TEXT_FIELDS:
        value = event.get(key)
        if isinstance(value, str):
            card[key] = _clip(value)
    index = event.get("index")
    if isinstance(index, int) and not isinstance(index, bool) and index >= 1:
        card["index"] = index
    for key in TIME_FIELDS:
        if key not in event:
            continue
        value = event[key]
        if value is None:
            card[key] = None
        elif _number(value) and abs(value) < 1e12:
            card[key] = float(value)
    return card

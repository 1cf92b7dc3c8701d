"""The bridge wire protocol (version 1): request bodies, stream lines and the job-log shape.

A request is ``POST /bridge`` with ``{"text", "conversationKey"?, "requestId"?, "origin"?}``.
Asking with ``Accept: application/x-ndjson`` gets a stream of JSON lines::

    {"type":"accepted","requestId":"…","protocol":1}
    {"type":"status","text":"→ running bash","seq":1}
    {"type":"heartbeat"}
    {"type":"final","text":"…","requestId":"…","seq":2,"status":"done"}

ending with exactly one ``final`` or ``error`` line. Otherwise the answer is one JSON body
``{"text", "requestId", "status"}``. A run that chose to say nothing (``[SILENT]``) ends with
empty ``text`` and ``"silent": true`` (in both shapes), so its caller posts nothing either.
Readers ignore line types and fields they do not know, and the agent ignores request fields it
does not know.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from iris_runtime.engine.channels import is_safe_token, validate_token
from iris_runtime.errors import InvalidInput

PROTOCOL_VERSION = 1
NDJSON = "application/x-ndjson"
TERMINAL_TYPES = frozenset({"final", "error"})
REQUEST_FIELDS = frozenset({"text", "conversationKey", "requestId", "origin"})
MAX_ORIGIN_CHARS = 500
# Sessions of requests that named no conversation: one each, swept with the job logs.
ONE_OFF_PREFIX = "bridge-oneoff-"


@dataclass(frozen=True)
class BridgeRequest:
    text: str
    conversation_key: str | None
    request_id: str | None
    origin: str | None


def validate_request_id(request_id: str) -> str:
    """Request ids name files (``bridge-jobs/<id>.jsonl``), so only safe tokens pass."""
    return validate_token(request_id, "request id", "invalid_request_id")


def parse_request(body: dict[str, Any]) -> BridgeRequest:
    """The request's known fields, checked; fields it does not know are ignored, so a newer Iris
    can add some without breaking older agents (a known field of the wrong type is still a 400)."""
    text = body.get("text")
    if text is None:
        raise InvalidInput("'text' is required", code="missing_fields")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("'text' must be a non-empty string", code="invalid_field")
    out: dict[str, str | None] = {}
    for name in ("conversationKey", "requestId", "origin"):
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidInput(f"{name!r} must be a non-empty string", code="invalid_field")
        out[name] = value
    if out["origin"] and len(out["origin"]) > MAX_ORIGIN_CHARS:
        raise InvalidInput(f"'origin' is longer than {MAX_ORIGIN_CHARS}", code="invalid_field")
    request_id = out["requestId"]
    return BridgeRequest(
        text=text,
        conversation_key=out["conversationKey"],
        request_id=validate_request_id(request_id) if request_id else None,
        origin=out["origin"],
    )


def conversation_session(conversation_key: str | None, request_id: str) -> str:
    """The sub-agent session id that a conversation key maps to (stable, filesystem-safe)."""
    if conversation_key is None:
        return f"{ONE_OFF_PREFIX}{request_id}"
    if len(conversation_key) <= 120 and is_safe_token(conversation_key):
        return f"bridge-{conversation_key}"
    digest = hashlib.sha256(conversation_key.encode("utf-8")).hexdigest()[:40]
    return f"bridge-k{digest}"


def bearer_header(token: str | None) -> dict[str, str]:
    """The header that authenticates a caller of a bridge (none without a token: an old-style
    agent asks for nothing, and a new one answers 401 to make the missing token plain)."""
    return {"Authorization": f"Bearer {token}"} if token else {}

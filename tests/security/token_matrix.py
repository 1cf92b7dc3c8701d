"""The token matrix: what every listener answers each kind of caller, as one table.

Rows are the routes of the internal API (``docs/openapi.yaml``), of a sub-agent's bridge and of
the Web UI, plus a few routes asked of a listener that does not serve them; columns are the
callers. Each cell is the decision the docs promise (``docs/http_api.md``, ``docs/openapi.yaml``,
``docs/bridge.md``, ``docs/secrets.md``, ``docs/webui.md``). ``test_token_matrix`` checks every
cell against served processes, and ``docs/security.md`` shows this table rendered::

    .venv/bin/python -m tests.security.token_matrix          # print the Markdown
    .venv/bin/python -m tests.security.token_matrix --write  # refresh docs/security.md
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

API, BRIDGE, WEBUI = "api", "bridge", "webui"
LISTENER_NAMES = {
    API: "API",
    BRIDGE: "agent A's bridge",
    WEBUI: "Web UI",
}

# The callers, in column order.
NONE, WRONG, AGENT_A, AGENT_B, SHARED, COOKIE, PAGE = (
    "none",
    "wrong",
    "agent_a",
    "agent_b",
    "shared",
    "cookie",
    "page",
)
CALLERS = (NONE, WRONG, AGENT_A, AGENT_B, SHARED, COOKIE, PAGE)
CALLER_NAMES = {
    NONE: "no token",
    WRONG: "wrong token",
    AGENT_A: "agent A's token",
    AGENT_B: "agent B's token",
    SHARED: "Iris API token",
    COOKIE: "Web UI cookie alone",
    PAGE: "Web UI page",
}

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
START = "<!-- token-matrix:start -->"
END = "<!-- token-matrix:end -->"
REGENERATE = ".venv/bin/python -m tests.security.token_matrix --write"


@dataclass(frozen=True)
class Decision:
    """What a caller gets: the HTTP status and, where it tells answers apart, the ``code`` of
    the error body (for a redirect: where to; for a WebSocket: its first frame). ``allowed``:
    the caller got past authentication (shown in bold), so the request did its work."""

    status: int
    code: str | None = None
    allowed: bool = True
    close_code: int | None = None  # a WebSocket closed after its first frame

    def label(self) -> str:
        status = f"**{self.status}**" if self.allowed else str(self.status)
        code = f" `{self.code}`" if self.code else ""
        closed = f", closed {self.close_code}" if self.close_code else ""
        return f"{status}{code}{closed}"


OK = Decision(200)
CREATED = Decision(201)
ACCEPTED = Decision(202)
NO_CONTENT = Decision(204)
UNAUTHORIZED = Decision(401, "unauthorized", allowed=False)
FORBIDDEN = Decision(403, "forbidden", allowed=False)
DENIED = Decision(403, "secret_denied", allowed=False)
PAGE_KEY = Decision(401, "page_key_required", allowed=False)
TO_LOGIN = Decision(303, "/login", allowed=False)
NOT_HERE = Decision(404, "not_found", allowed=False)
NO_JOB = Decision(404, "unknown_job")  # let in, and told there is no such job
# The Web UI's socket: refused before the upgrade, or upgraded and then answered by its hello.
WS_REFUSED = Decision(401, "unauthorized", allowed=False)
WS_NO_KEY = Decision(101, "page_key_required", allowed=False, close_code=1008)
WS_READY = Decision(101, "ready")


@dataclass(frozen=True)
class Row:
    listener: str
    method: str
    path: str  # as docs/openapi.yaml writes it (Flask's <x> shown as {x} elsewhere)
    decisions: tuple[Decision, ...]  # one per caller, in CALLERS order
    case: str = ""  # which instance of the route, when the answer depends on it
    served: bool = True  # False: asked of a listener that does not serve it

    @property
    def key(self) -> str:
        case = f" ({self.case})" if self.case else ""
        return f"{self.listener} {self.method} {self.path}{case}"

    def decision(self, caller: str) -> Decision:
        return self.decisions[CALLERS.index(caller)]


def _row(listener: str, route: str, *decisions: Decision, served: bool = True) -> Row:
    """A row from ``"METHOD /path"`` or ``"METHOD /path (case)"`` and one decision per caller."""
    assert len(decisions) == len(CALLERS), route
    method, rest = route.split(" ", 1)
    path, _, case = rest.partition(" (")
    return Row(listener, method, path, decisions, case.removesuffix(")"), served)


def _elsewhere(listener: str, route: str, *decisions: Decision) -> Row:
    """A row for a route asked of a listener that does not serve it."""
    return _row(listener, route, *decisions, served=False)


# Short names, so that the decisions line up in columns.
U, F, D, P = UNAUTHORIZED, FORBIDDEN, DENIED, PAGE_KEY
N, L, W = NOT_HERE, TO_LOGIN, WS_REFUSED

# fmt: off
MATRIX: tuple[Row, ...] = (
    # Internal API (IRIS_API_PORT): the Iris API token opens everything; an agent's own token
    # only POST /escalate and /secrets (where the broker limits it to its allow-list).
    #   none  wrong  agent A   agent B   Iris API    cookie     page
    _row(API, "GET /health",
        OK,   OK,    OK,       OK,       OK,         OK,        OK),
    _row(API, "POST /sessions/{session_id}/message",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /sessions/{session_id}/attachments",
        U,    U,     F,        F,        CREATED,    U,         U),
    _row(API, "POST /sessions/{session_id}/stop",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "GET /sessions/{session_id}/stream",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "GET /sessions/{session_id}/history",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "GET /sessions/{session_id}/subagents",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /sessions/{session_id}/reset",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /sessions/{session_id}/inject-turn",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "GET /channels",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /channels/{channel_id}/events",
        U,    U,     F,        F,        ACCEPTED,   U,         U),
    _row(API, "POST /escalate",
        U,    U,     ACCEPTED, ACCEPTED, ACCEPTED,   U,         U),
    _row(API, "GET /secrets",
        U,    U,     D,        D,        OK,         U,         U),
    _row(API, "GET /secrets/{name} (on A's allow-list)",
        U,    U,     OK,       D,        OK,         U,         U),
    _row(API, "GET /secrets/{name} (on no allow-list)",
        U,    U,     D,        D,        OK,         U,         U),
    _row(API, "PUT /secrets/{name}",
        U,    U,     D,        D,        OK,         U,         U),
    _row(API, "DELETE /secrets/{name}",
        U,    U,     D,        D,        NO_CONTENT, U,         U),
    _row(API, "GET /events",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /events",
        U,    U,     F,        F,        CREATED,    U,         U),
    _row(API, "DELETE /events/{name}",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /events/{name}/fire",
        U,    U,     F,        F,        ACCEPTED,   U,         U),
    _row(API, "GET /custom-agents",
        U,    U,     F,        F,        OK,         U,         U),
    _row(API, "POST /custom-agents/{kind}/restart",
        U,    U,     F,        F,        OK,         U,         U),
    # A sub-agent's bridge (BRIDGE_PORT): its own API token only, Iris's included never.
    _row(BRIDGE, "POST /bridge",
        U,    U,     OK,       U,        U,          U,         U),
    _row(BRIDGE, "GET /bridge/jobs/{request_id}",
        U,    U,     OK,       U,        U,          U,         U),
    # What `iris agents spawn` asks to tell "not this agent's token" (401) from "ready" (404).
    _row(BRIDGE, "GET /bridge/jobs/{request_id} (no such job)",
        U,    U,     NO_JOB,   U,        U,          U,         U),
    # The Web UI (IRIS_WEBUI_PORT): no bearer token opens it; the cookie alone opens the page,
    # the cookie with the page's key (X-Iris-Page-Key, or the socket's hello) opens the rest.
    _row(WEBUI, "GET /",
        L,    L,     L,        L,        L,          OK,        OK),
    _row(WEBUI, "GET /api/sessions",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "POST /api/sessions",
        U,    U,     U,        U,        U,          P,         CREATED),
    _row(WEBUI, "GET /api/sessions/{session}/history",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "GET /api/agents",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "POST /api/sessions/{session}/uploads",
        U,    U,     U,        U,        U,          P,         CREATED),
    _row(WEBUI, "GET /api/sessions/{session}/files/{relative}",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "GET /api/sessions/{session}/agents/{kind}/model",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "POST /api/sessions/{session}/agents/{kind}/model",
        U,    U,     U,        U,        U,          P,         OK),
    _row(WEBUI, "GET /ws",
        W,    W,     W,        W,        W,          WS_NO_KEY, WS_READY),
    # Asked of a listener that does not serve them: 404 whoever asks, with no token needed.
    _elsewhere(BRIDGE, "GET /health",
        N,    N,     N,        N,        N,          N,         N),
    _elsewhere(BRIDGE, "GET /secrets/{name} (on A's allow-list)",
        N,    N,     N,        N,        N,          N,         N),
    _elsewhere(API, "POST /bridge",
        N,    N,     N,        N,        N,          N,         N),
    _elsewhere(API, "GET /api/sessions",
        N,    N,     N,        N,        N,          N,         N),
    _elsewhere(WEBUI, "GET /secrets/{name} (on A's allow-list)",
        N,    N,     N,        N,        N,          N,         N),
)
# fmt: on


def render() -> str:
    """The Markdown table (what sits between the markers in docs/security.md)."""
    header = ["listener", "route", *(CALLER_NAMES[c] for c in CALLERS)]
    lines = [_markdown_row(header), _markdown_row(["---"] * len(header))]
    for row in MATRIX:
        route = f"`{row.method} {row.path}`" + (f" ({row.case})" if row.case else "")
        listener = LISTENER_NAMES[row.listener] + ("" if row.served else " (not served)")
        cells = [d.label() for d in row.decisions]
        lines.append(_markdown_row([listener, route, *cells]))
    return "\n".join(lines) + "\n"


def _markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def documented(text: str) -> str | None:
    """The table between the markers of ``text``, or None when a marker is missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START) : end].strip("\n") + "\n"


def rewritten(text: str) -> str:
    """``text`` with the table between its markers replaced by the rendered one."""
    start, end = text.index(START) + len(START), text.index(END)
    return text[:start] + "\n" + render() + text[end:]


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        DOC.write_text(rewritten(DOC.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m tests.security.token_matrix [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

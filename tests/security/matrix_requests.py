"""What a cell of the token matrix sends, as which caller, and what it gets back: the request
with the caller's credentials (a bearer token, the Web UI cookie, the page's key), or for the
Web UI's socket its handshake and the first frame answering its hello."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import requests
import websocket

from tests.security.matrix_served import COOKIE_NAME, DEADLINE, PAGE_KEY_HEADER, Served
from tests.security.token_matrix import AGENT_A, AGENT_B, NONE, PAGE, SHARED, WEBUI, WRONG, Row


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    data: bytes | None = None
    files: dict[str, tuple[str, bytes, str]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True)
class Answer:
    status: int
    code: str | None
    headers: dict[str, str]
    close_code: int | None = None  # a WebSocket closed after its first frame


def credentials(served: Served, caller: str) -> dict[str, str]:
    """The headers that make a request come from ``caller``."""
    bearer = {
        NONE: None,
        WRONG: served.wrong_token,
        AGENT_A: served.agent.token,
        AGENT_B: served.b_token,
        SHARED: served.iris.token,
    }
    if caller in bearer:
        token = bearer[caller]
        return {} if token is None else {"Authorization": f"Bearer {token}"}
    headers = {"Cookie": f"{COOKIE_NAME}={served.cookie}"}
    if caller == PAGE:
        headers[PAGE_KEY_HEADER] = served.page_key
    return headers


def send(served: Served, row: Row, caller: str, call: Call) -> Answer:
    headers = {**credentials(served, caller), **call.headers}
    if row.listener == WEBUI:
        headers["Origin"] = served.webui_url  # the page's own: only the credentials differ
    if call.path.startswith("/ws"):
        return open_socket(served, caller, call.path, headers)
    reply = requests.request(
        call.method,
        served.base_url(row.listener) + call.path,
        json=call.json,
        data=call.data,
        files=call.files,
        headers=headers,
        allow_redirects=False,
        stream=call.stream,
        timeout=60,
    )
    with reply:
        return Answer(reply.status_code, code_of(reply), dict(reply.headers))


def code_of(reply: requests.Response) -> str | None:
    """What tells one answer from another: a redirect's target, an error body's ``code``."""
    if reply.is_redirect:
        return reply.headers.get("Location")
    if reply.status_code < 300 or not reply.headers.get("Content-Type", "").startswith(
        "application/json"
    ):
        return None
    code = reply.json().get("code")
    return str(code) if code is not None else None


def open_socket(served: Served, caller: str, path: str, headers: dict[str, str]) -> Answer:
    """The socket's handshake; once upgraded, its hello (with the page key the caller has, if
    any) and the first frame that answers it."""
    origin = headers.pop("Origin")
    url = f"ws://127.0.0.1:{served.webui_port}{path}"
    try:
        ws = websocket.create_connection(url, header=headers, origin=origin, timeout=DEADLINE)
    except websocket.WebSocketBadStatusException as refused:
        body = json.loads(refused.resp_body or b"{}")
        return Answer(refused.status_code, body.get("code"), dict(refused.resp_headers or {}))
    try:
        hello: dict[str, str] = {"type": "hello"}
        if PAGE_KEY_HEADER in headers:
            hello["page_key"] = headers[PAGE_KEY_HEADER]
        ws.send(json.dumps(hello))
        frame = json.loads(ws.recv())
        if frame.get("type") != "error":
            return Answer(101, frame.get("type"), {})
        opcode, payload = ws.recv_data(control_frame=True)
        closed = (
            int.from_bytes(payload[:2], "big") if opcode == websocket.ABNF.OPCODE_CLOSE else None
        )
        return Answer(101, frame.get("code"), {}, close_code=closed)
    finally:
        ws.close()

"""Helpers for the Web UI server tests: a real ``iris serve`` with the Web UI on, logged in
through the one-time link it printed, and a real WebSocket client (``websocket-client``).

Frames are read until the one a test waits for arrives (with a generous deadline for slow
machines); nothing asserts on timing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris

PAGE_KEY_HEADER = "X-Iris-Page-Key"
LOGIN_LINK = re.compile(r"Web UI: (http://\S+/login\?key=(\S+))")
DEADLINE = 30.0  # seconds for an awaited frame to arrive: a bound on a hang, not a timing

Frame = dict[str, Any]


class Socket:
    """One browser-style WebSocket: JSON frames in and out, and every frame seen so far."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self.ws = ws
        self.frames: list[Frame] = []

    def send(self, frame: Frame) -> None:
        self.ws.send(json.dumps(frame))

    def recv(self, timeout: float = DEADLINE) -> Frame:
        self.ws.settimeout(timeout)
        raw = self.ws.recv()
        frame: Frame = json.loads(raw)
        self.frames.append(frame)
        return frame

    def until(self, done: Callable[[Frame], bool], timeout: float = DEADLINE) -> list[Frame]:
        """Frames up to and including the first one ``done`` accepts."""
        seen: list[Frame] = []
        while True:
            frame = self.recv(timeout)
            seen.append(frame)
            if done(frame):
                return seen

    def final(self, timeout: float = DEADLINE) -> list[Frame]:
        return self.until(is_final, timeout)

    def close(self) -> None:
        self.ws.close()


def is_final(frame: Frame) -> bool:
    return frame.get("type") == "reply" and frame.get("final") is True


@dataclass
class WebIris:
    server: IrisServer
    port: int
    script: Path
    calls: Path
    sockets: list[Socket] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.url

    def rules(self, rules: list[dict[str, Any]]) -> None:
        self.script.write_text(json.dumps({"rules": rules}))

    def log_text(self) -> str:
        assert self.server.log_path is not None
        return self.server.log_path.read_text(errors="replace")

    def login_key(self) -> str:
        """The key of the last login link ``iris serve`` printed on stderr."""
        found = LOGIN_LINK.findall(self.log_text())
        assert found, self.server.log_tail()
        link, key = found[-1]
        assert link.startswith(f"{self.url}/login?key=")
        return str(key)

    def http(self) -> requests.Session:
        """A client that behaves like the page: its own Origin on every request."""
        session = requests.Session()
        session.headers["Origin"] = self.origin
        return session

    def login(self) -> requests.Session:
        """Logged in like the page: the cookie, and the page key from the redirect's fragment
        sent on every request (``X-Iris-Page-Key``) and in each socket's hello."""
        http = self.http()
        reply = http.get(f"{self.url}/login", params={"key": self.login_key()}, timeout=30)
        assert reply.status_code == 200, reply.text  # followed the redirect to the chat page
        assert http.cookies.get("iris_webui")
        location = reply.history[0].headers["Location"]
        assert location.startswith("/#k="), location
        http.headers[PAGE_KEY_HEADER] = location.removeprefix("/#k=")
        return http

    def login_with_password_or_link(self) -> requests.Session:
        """A second, separate login (another browser): a fresh link through the CLI."""
        env = clean_environment(IRIS_DATA_DIR=str(self.server.data_dir))
        env["IRIS_WEBUI_PORT"] = str(self.port)
        done = run_iris("webui", "link", env=env)
        assert done.returncode == 0, done.stderr
        key = done.stdout.strip().rsplit("key=", 1)[-1]
        http = self.http()
        reply = http.get(f"{self.url}/login", params={"key": key}, timeout=30)
        assert reply.status_code == 200, reply.text
        location = reply.history[0].headers["Location"]
        http.headers[PAGE_KEY_HEADER] = location.removeprefix("/#k=")
        return http

    def new_session(self, http: requests.Session) -> str:
        reply = http.post(f"{self.url}/api/sessions", json={}, timeout=30)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["id"])

    def open_conversation(self) -> tuple[requests.Session, str, Socket]:
        """Signed in, a new conversation, and a socket on it past its ``ready`` frame."""
        http = self.login()
        session = self.new_session(http)
        sock = self.connect(http, session)
        sock.recv()
        return http, session, sock

    def connect(
        self,
        http: requests.Session,
        session: str,
        *,
        agent: str | None = None,
        origin: str | None = None,
        cookie: bool = True,
        hello: bool = True,
    ) -> Socket:
        """A socket on ``session``; with ``hello`` its first frame is the page key's hello."""
        query = f"session={session}" + (f"&agent={agent}" if agent else "")
        headers = {}
        if cookie:
            headers["Cookie"] = f"iris_webui={http.cookies.get('iris_webui')}"
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.port}/ws?{query}",
            header=headers,
            origin=origin or self.origin,
            timeout=DEADLINE,
        )
        sock = Socket(ws)
        self.sockets.append(sock)
        if hello:
            sock.send({"type": "hello", "page_key": http.headers.get(PAGE_KEY_HEADER, "")})
        return sock

    def until_connected(self, http: requests.Session, session: str) -> Socket:
        """Connect, retrying while the server still counts a socket that is closing (503)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                return self.connect(http, session)
            except websocket.WebSocketBadStatusException as exc:
                if exc.status_code != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def history(self, http: requests.Session, session: str) -> list[dict[str, Any]]:
        reply = http.get(f"{self.url}/api/sessions/{session}/history", timeout=30)
        assert reply.status_code == 200, reply.text
        messages: list[dict[str, Any]] = reply.json()["messages"]
        return messages


@pytest.fixture
def start_web_iris(tmp_path: Path) -> Iterator[Callable[..., WebIris]]:
    """``start(rules=None, data_dir=None, **env)``: an Iris with the Web UI on a free port and
    the scripted provider (``IRIS_SCRIPT_CALLS_FILE`` records every model call)."""
    started: list[WebIris] = []

    def start(
        rules: list[dict[str, Any]] | None = None, data_dir: Path | None = None, **env: str
    ) -> WebIris:
        number = len(started)
        script = tmp_path / f"script{number}.json"
        script.write_text(json.dumps({"rules": rules or []}))
        calls = tmp_path / f"calls{number}.jsonl"
        calls.touch()
        port = free_port()
        server = IrisServer(
            data_dir or tmp_path / f"data{number}",
            env={
                "IRIS_WEBUI_PORT": str(port),
                "IRIS_PROVIDER": "scripted",
                "IRIS_SCRIPT_FILE": str(script),
                "IRIS_SCRIPT_CALLS_FILE": str(calls),
                **env,
            },
        )
        web = WebIris(server, port, script, calls)
        started.append(web)
        server.start()
        return web

    yield start
    for web in started:
        for sock in web.sockets:
            sock.close()
        web.server.stop()


def served_handmade_log(
    start_web_iris: Callable[..., WebIris], data_dir: Path, log_text: str
) -> tuple[WebIris, requests.Session]:
    """A served Web UI whose data folder already holds conversation ``handmade`` with
    ``log_text`` as its log (as a crash or a hand edit may leave it), and a signed-in client."""
    folder = data_dir / "WEBUI-handmade"
    folder.mkdir(parents=True)
    (folder / "log.jsonl").write_text(log_text, encoding="utf-8")
    web = start_web_iris(data_dir=data_dir)
    return web, web.login()

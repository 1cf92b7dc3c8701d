"""A Web UI client as a browser is one, for ``webui_round_trip`` and ``held_streams``, and the
baseline server it is compared with.

It logs in with the one-time key that ``iris serve`` prints (``/login?key=...``;
``IRIS_WEBUI_PASSWORD`` through ``POST /login`` if no key is found) for the ``iris_webui`` cookie
and the page key, creates conversations with ``POST /api/sessions`` and opens
``/ws?session=<id>`` with that cookie and the UI's own ``Origin`` (websocket-client). The baseline
is a bare flask-sock echo app (a ``/ws`` route that sends every frame back) under gunicorn
gthread, configured like Iris.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import requests
import websocket  # websocket-client
from _servers import HOST, Server, free_port, log_tail, serving, start_echo, start_iris

COOKIE = "iris_webui"
PASSWORD = "bench-webui-password"  # a throwaway for a temporary server, passed by environment
KEY_RE = re.compile(r"/login\?key=([A-Za-z0-9_.~%-]+)")

WS_ECHO_APP = '''\
"""Bare flask-sock echo app: the baseline for the Web UI benchmark."""

from flask import Flask
from flask_sock import Sock

app = Flask(__name__)
sock = Sock(app)


@app.get("/health")
def health():
    return {"status": "ok"}


@sock.route("/ws")
def echo(ws):
    while True:
        ws.send(ws.receive())
'''


class Target(NamedTuple):
    """A started server and how to open a socket on it: ``ws_url(session)`` and the headers a
    browser would send (``cookie``, ``origin``; empty for the echo)."""

    kind: str
    server: Server
    http_url: str  # the Web UI's (or the echo's) base URL
    cookie: str
    origin: str
    page_key: str = ""  # the Web UI's second secret: API header and the socket's hello frame

    def ws_url(self, session: str) -> str:
        base = self.http_url.replace("http://", "ws://", 1)
        return f"{base}/ws?session={session}" if self.kind == "iris" else f"{base}/ws"


# --- servers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def running_ws_echo(workdir: Path, *, threads: int) -> Iterator[Target]:
    """The baseline: the flask-sock echo under gunicorn gthread, configured like Iris."""
    server = start_echo(workdir, threads=threads, source=WS_ECHO_APP)
    with serving(server, "ws echo"):
        yield Target("echo", server, server.base_url, "", "")


def login(server: Server, ui_url: str) -> tuple[str, str]:
    """The ``iris_webui`` cookie value and the page key: the one-time key from the log, else the
    password. A login redirects to ``/#k=<page key>``."""
    key = None
    deadline = time.perf_counter() + 5.0
    while key is None and time.perf_counter() < deadline:
        found = KEY_RE.search(log_tail(server.process, lines=400))
        key = found.group(1) if found else None
        if key is None:
            time.sleep(0.05)
    with requests.Session() as http:
        if key is not None:
            response = http.get(f"{ui_url}/login", params={"key": key}, allow_redirects=False)
        else:
            print("no login key in the log; using IRIS_WEBUI_PASSWORD", file=sys.stderr)
            response = http.post(
                f"{ui_url}/login",
                data={"password": PASSWORD},
                headers={"Origin": ui_url},
                allow_redirects=False,
            )
        cookie = http.cookies.get(COOKIE)
    page_key = response.headers.get("Location", "").partition("#k=")[2]
    if response.status_code >= 400 or not cookie or not page_key:
        raise RuntimeError(f"login failed: HTTP {response.status_code} {response.text[:200]}")
    return cookie, page_key


def webui_env(ui_port: int) -> dict[str, str]:
    """What turns the Web UI on, on ``ui_port``, with the bench's password as the fallback."""
    return {"IRIS_WEBUI_PORT": str(ui_port), "IRIS_WEBUI_PASSWORD": PASSWORD}


def logged_in(server: Server, ui_port: int) -> Target:
    """The Web UI of a healthy ``server`` on ``ui_port``, logged in like a browser."""
    ui_url = f"http://{HOST}:{ui_port}"
    cookie, page_key = login(server, ui_url)
    return Target("iris", server, ui_url, f"{COOKIE}={cookie}", ui_url, page_key)


@contextlib.contextmanager
def running_webui(workdir: Path, *, threads: int) -> Iterator[Target]:
    """``iris serve`` (offline provider) with the Web UI on its own port, logged in."""
    ui_port = free_port()
    env = {**webui_env(ui_port), "IRIS_THREADS": str(threads)}
    with serving(start_iris(workdir, extra_env=env), "iris") as server:
        try:
            target = logged_in(server, ui_port)
        except (RuntimeError, requests.RequestException) as exc:
            raise RuntimeError(f"iris: {exc}\n{log_tail(server.process)}") from None
        yield target


def new_sessions(target: Target, count: int) -> list[str]:
    """``count`` conversations: ``POST /api/sessions`` on Iris, dummy ids for the echo."""
    if target.kind != "iris":
        return [f"echo-{i}" for i in range(count)]
    ids: list[str] = []
    headers = {
        "Cookie": target.cookie,
        "Origin": target.origin,
        "X-Iris-Page-Key": target.page_key,
    }
    with requests.Session() as http:
        for _ in range(count):
            response = http.post(
                f"{target.http_url}/api/sessions", json={}, headers=headers, timeout=30
            )
            if response.status_code not in {200, 201}:
                raise RuntimeError(
                    f"POST /api/sessions: HTTP {response.status_code} {response.text[:200]}"
                )
            ids.append(str(response.json()["id"]))
    return ids


# --- one socket -------------------------------------------------------------------------------


def connect(target: Target, session: str, timeout: float = 30.0) -> websocket.WebSocket:
    """Open a socket as a browser would; on Iris, wait for the ``ready`` frame."""
    if target.kind != "iris":
        return websocket.create_connection(target.ws_url(session), timeout=timeout)
    ws = websocket.create_connection(
        target.ws_url(session), timeout=timeout, cookie=target.cookie, origin=target.origin
    )
    try:
        ws.send(json.dumps({"type": "hello", "page_key": target.page_key}))
        frame = json.loads(ws.recv())
        if frame.get("type") != "ready":
            raise RuntimeError(f"first frame is not ready: {str(frame)[:200]}")
    except BaseException:
        ws.close()
        raise
    return ws


def round_trip(target: Target, ws: websocket.WebSocket, text: str) -> float:
    """Send one message and wait for its answer; returns the latency in ms. Raises
    RuntimeError on anything but the expected answer."""
    if target.kind == "echo":
        frame = json.dumps({"type": "message", "text": text})
        start = time.perf_counter()
        ws.send(frame)
        answer = ws.recv()
        elapsed = (time.perf_counter() - start) * 1000.0
        if answer != frame:
            raise RuntimeError(f"echo mismatch: {str(answer)[:200]}")
        return elapsed
    start = time.perf_counter()
    ws.send(json.dumps({"type": "message", "text": text}))
    while True:
        event = json.loads(ws.recv())
        kind = event.get("type")
        if kind == "reply" and event.get("final"):
            elapsed = (time.perf_counter() - start) * 1000.0
            if event.get("status", "completed") != "completed" or not event.get("text"):
                raise RuntimeError(f"unexpected final reply: {str(event)[:200]}")
            return elapsed
        if kind == "error":
            raise RuntimeError(f"error frame: {str(event)[:200]}")


def ping(ws: websocket.WebSocket) -> float:
    """``{"type": "ping"}`` until ``pong`` on an Iris socket: the transport alone, no turn."""
    start = time.perf_counter()
    ws.send('{"type": "ping"}')
    while True:
        event = json.loads(ws.recv())
        if event.get("type") == "pong":
            return (time.perf_counter() - start) * 1000.0
        if event.get("type") == "error":
            raise RuntimeError(f"error frame: {str(event)[:200]}")

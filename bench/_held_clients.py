"""Asyncio clients that hold streams open for ``held_streams``: session SSE and streamed bridge
requests over raw HTTP/1.0 (the body is the stream, no chunking), Web UI sockets with wsproto
(a dependency of the Web UI plugin's simple-websocket). Each records when it last heard from
the server, so a stalled stream shows as a long gap between heartbeats."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

OPEN_TIMEOUT_S = 60.0


class HeldStream:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.open = False
        self.closed = False
        self.heard: list[float] = []
        self.watch_from = 0.0
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    def longest_gap(self) -> float:
        """Longest silence since ``watch_from``, up to now."""
        times = [self.watch_from, *(t for t in self.heard if t > self.watch_from), time.monotonic()]
        return max(b - a for a, b in itertools.pairwise(times))

    async def check(self) -> bool:
        return self.open and not self.closed

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()

    async def read_lines(self) -> None:
        assert self.reader is not None
        while line := await self.reader.readline():
            if line.strip():
                self.heard.append(time.monotonic())
        self.closed = True


async def _http(url: str, request: bytes) -> tuple[HeldStream, int, dict[str, str]]:
    parts = urlsplit(url)
    stream = HeldStream("http")
    stream.reader, stream.writer = await asyncio.open_connection(parts.hostname, parts.port)
    stream.writer.write(request)
    status_line = await asyncio.wait_for(stream.reader.readline(), OPEN_TIMEOUT_S)
    headers: dict[str, str] = {}
    while (line := await stream.reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return stream, int(status_line.split()[1]), headers


def _get(url: str, path: str, token: str) -> bytes:
    host = urlsplit(url).netloc
    return f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()


async def open_sse(url: str, token: str, session: str) -> HeldStream:
    stream, status, _ = await _http(url, _get(url, f"/sessions/{session}/stream", token))
    stream.kind = "sse"
    stream.open = status == 200
    if stream.open:
        stream.task = asyncio.create_task(stream.read_lines())
    return stream


async def try_sse(url: str, token: str, session: str) -> tuple[int, float]:
    """One more SSE stream: its status (503 counts only with Retry-After) and time to it."""
    started = time.perf_counter()
    stream, status, headers = await _http(url, _get(url, f"/sessions/{session}/stream", token))
    elapsed = (time.perf_counter() - started) * 1000
    stream.close()
    if status == 503 and "retry-after" not in headers:
        status = 0
    return status, elapsed


async def open_bridge(url: str, token: str, key: str) -> HeldStream:
    body = json.dumps({"text": "hold on", "conversationKey": key}).encode()
    request = (
        f"POST /bridge HTTP/1.0\r\nHost: {urlsplit(url).netloc}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: application/x-ndjson\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    stream, status, _ = await _http(url, request)
    stream.kind = "bridge"
    stream.open = status == 200
    if stream.open:
        stream.task = asyncio.create_task(stream.read_lines())
    return stream


class HeldSocket(HeldStream):
    """A Web UI socket: answers the server's pings; ``check`` sends ``{"type": "ping"}``."""

    def __init__(self) -> None:
        super().__init__("socket")
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.frames: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self._text = ""

    def send(self, event: Event) -> None:
        assert self.writer is not None
        self.writer.write(self.ws.send(event))

    async def events(self) -> list[Event]:
        assert self.reader is not None
        data = await self.reader.read(65536)
        self.ws.receive_data(data or None)
        return list(self.ws.events())

    def on_event(self, event: Event) -> None:
        if isinstance(event, Ping):
            self.send(event.response())
        elif isinstance(event, TextMessage):
            self._text += event.data
            if event.message_finished:
                self.heard.append(time.monotonic())
                self.frames.put_nowait(json.loads(self._text))
                self._text = ""
        elif isinstance(event, (CloseConnection, RejectConnection)):
            self.closed = True

    async def pump(self) -> None:
        while not self.closed:
            found = await self.events()
            if not found and self.reader is not None and self.reader.at_eof():
                self.closed = True
            for event in found:
                self.on_event(event)

    async def next_frame(self, kind: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = await asyncio.wait_for(self.frames.get(), left)
            except TimeoutError:
                return False
            if frame.get("type") == kind:
                return True
        return False

    async def check(self) -> bool:
        if not self.open or self.closed:
            return False
        self.send(TextMessage(json.dumps({"type": "ping"})))
        return await self.next_frame("pong", 15.0)


async def open_socket(target: object, session: str) -> HeldSocket:
    """Log in like a browser (cookie, Origin), say hello with the page key, wait for ready."""
    parts = urlsplit(target.http_url)  # type: ignore[attr-defined]
    sock = HeldSocket()
    sock.reader, sock.writer = await asyncio.open_connection(parts.hostname, parts.port)
    headers = [(b"cookie", target.cookie.encode()), (b"origin", target.origin.encode())]  # type: ignore[attr-defined]
    sock.send(Request(host=parts.netloc, target=f"/ws?session={session}", extra_headers=headers))
    accepted = False
    while not accepted and not sock.closed:
        for event in await asyncio.wait_for(sock.events(), OPEN_TIMEOUT_S):
            accepted = accepted or isinstance(event, AcceptConnection)
            sock.on_event(event)
    if not accepted:
        return sock
    sock.task = asyncio.create_task(sock.pump())
    page_key = target.page_key  # type: ignore[attr-defined]
    sock.send(TextMessage(json.dumps({"type": "hello", "page_key": page_key})))
    sock.open = await sock.next_frame("ready", OPEN_TIMEOUT_S)
    return sock

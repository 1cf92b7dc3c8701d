"""Stops and stalls of a provider call that runs on the caller's thread: the real SDKs against
loopback servers that go silent at each stage of a call (no headers, keep-alives only), and the
connect step, which has no socket to interrupt, on its own."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpcore2
import pytest

from iris_runtime.engine.provider import Done, TextDelta
from iris_runtime.providers import anthropic, interrupt
from iris_runtime.testing.fake_llm import FakeAnthropic, FakeOpenAI, Reply, Stall, Text
from tests.providers.common import HELLO, claude, collect, gpt, only_error, settings

Serve = Callable[[socket.socket], None]

PING = b'event: ping\ndata: {"type": "ping"}\n\n'
SSE_HEADERS = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


@contextlib.contextmanager
def silent_server(serve: Serve) -> Iterator[str]:
    """A loopback HTTP server whose every connection is handed to ``serve`` after the request
    headers are read; yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    peers: list[socket.socket] = []

    def accept() -> None:
        while not done.is_set():
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            peers.append(peer)
            threading.Thread(target=handle, args=(peer,), daemon=True).start()

    def handle(peer: socket.socket) -> None:
        with contextlib.suppress(OSError):
            peer.recv(65536)
            serve(peer)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        for peer in peers:
            peer.close()


def claude_at(tmp_path: Path, url: str, **env: str) -> anthropic.AnthropicProvider:
    return anthropic.create(
        settings(tmp_path, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=url, **env)
    )


def never_answer(peer: socket.socket) -> None:
    time.sleep(30)


def pings_only(peer: socket.socket) -> None:
    peer.sendall(SSE_HEADERS)
    for _ in range(300):
        peer.sendall(PING)
        time.sleep(0.1)


def test_both_sdks_connections_are_tracked(
    tmp_path: Path, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    """Otherwise stops fall back to a thread per attempt (see providers.interrupt)."""
    assert interrupt.track(claude(tmp_path, fake_anthropic).new_client("k"))
    assert interrupt.track(gpt(tmp_path, fake_openai).new_client("k"))


def test_a_stop_lands_while_the_server_has_sent_no_headers(tmp_path: Path) -> None:
    with silent_server(never_answer) as url:
        provider = claude_at(tmp_path, url, IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS="60")
        abort = threading.Event()
        threading.Timer(0.3, abort.set).start()
        started = time.monotonic()
        assert list(provider.stream(HELLO, abort)) == []
        assert time.monotonic() - started < 1.5


def test_keep_alives_alone_count_as_a_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("iris_runtime.providers.retry.STALL_GRACE", 0.0)
    with silent_server(pings_only) as url:
        provider = claude_at(
            tmp_path, url, IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS="1", IRIS_PROVIDER_MAX_RETRIES="0"
        )
        started = time.monotonic()
        error = only_error(collect(provider))
        assert time.monotonic() - started < 4
        assert "no data for 1s (stream stalled)" in error.message


def test_a_finished_answer_leaves_its_connection_for_the_next(
    tmp_path: Path, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects: list[str] = []
    connect_tcp = httpcore2.SyncBackend.connect_tcp

    def counting(self: httpcore2.SyncBackend, host: str, *args: object, **kwargs: object) -> object:
        connects.append(host)
        return connect_tcp(self, host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpcore2.SyncBackend, "connect_tcp", counting)
    fake_anthropic.enqueue(Reply([Text("one")]), Reply([Text("two")]))
    provider = claude(tmp_path, fake_anthropic)
    for expected in ("one", "two"):
        events = collect(provider)
        assert events[0] == TextDelta(expected) and isinstance(events[-1], Done)
    assert len(connects) == 1


def test_a_stop_abandons_a_connect_that_hangs() -> None:
    release = threading.Event()

    def hanging_connect() -> httpcore2.NetworkStream:
        release.wait(10)
        raise OSError("too late")

    abort = threading.Event()
    watch = interrupt.watch_call(abort, 30)
    threading.Timer(0.2, abort.set).start()
    started = time.monotonic()
    try:
        with interrupt.watching(watch), pytest.raises(httpcore2.ConnectError):
            interrupt._connect(hanging_connect)
    finally:
        interrupt.unwatch(watch)
        release.set()
    assert time.monotonic() - started < 1


def test_time_the_caller_spends_on_an_event_is_not_a_stall(
    tmp_path: Path, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport may take its time with an event (a rate-limited edit); only the server's
    silence counts towards the stall limit."""
    monkeypatch.setattr("iris_runtime.providers.retry.STALL_GRACE", 0.0)
    fake_anthropic.enqueue(Reply([Text("one"), Stall(0.2), Text("two")]))
    provider = claude(
        tmp_path, fake_anthropic, IRIS_PROVIDER_STREAM_TIMEOUT_SECONDS="0.5",
        IRIS_PROVIDER_MAX_RETRIES="0",
    )  # fmt: skip
    events = []
    for event in provider.stream(HELLO, threading.Event()):
        events.append(event)
        if len(events) == 1:
            time.sleep(1.5)  # three stall limits
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "onetwo"
    assert isinstance(events[-1], Done)

"""The serving worker keeps threads for requests that have something to say: idle, lingering and
stalled connections never stop ``/health`` (a served Iris with a tiny pool: 6 threads)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

from iris_runtime.testing.server import IrisServer

Start = Callable[..., IrisServer]
TINY = {"IRIS_THREADS": "4", "IRIS_MAX_STREAMS": "1", "IRIS_MAX_WAITS": "1"}  # 6 threads


@contextlib.contextmanager
def connections(server: IrisServer, count: int) -> Iterator[list[socket.socket]]:
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(count)]
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def health_within(server: IrisServer, seconds: float) -> bool:
    """Whether /health answers within ``seconds`` (a hang detector, not a benchmark)."""
    try:
        return server.get("/health", auth=False, timeout=seconds).status == 200
    except OSError:
        return False


def test_idle_connections_take_no_thread(start_iris: Start) -> None:
    """40 connections that send nothing: gunicorn's own worker gave each a thread for 5 s, so
    /health waited behind about 35 s of them."""
    server = start_iris(**TINY)
    with connections(server, 40):
        time.sleep(0.5)  # all accepted
        assert health_within(server, 10)


def test_clients_that_never_close_do_not_stall_the_server(start_iris: Start) -> None:
    """Each answered ``Connection: close`` request lingers up to 2 s for its client's FIN; on
    gunicorn's main loop 30 of them delayed everything by a minute."""
    server = start_iris(**TINY)
    request = b"GET /health HTTP/1.1\r\nHost: iris\r\nConnection: close\r\n\r\n"
    with connections(server, 30) as socks:
        for sock in socks:
            sock.sendall(request)
        assert health_within(server, 10)
        for sock in socks:  # each answered, and closed on the server's side (we never close)
            assert read_to_end(sock).startswith(b"HTTP/1.1 200")


def test_a_stalled_request_frees_its_thread(start_iris: Start) -> None:
    """Clients that stop halfway through their body: each holds a thread only until no byte
    has moved for IRIS_IO_TIMEOUT_SECONDS, then the connection is closed."""
    server = start_iris(IRIS_IO_TIMEOUT_SECONDS="1", **TINY)
    head = (
        "POST /sessions/s/message HTTP/1.1\r\nHost: iris\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Length: 100\r\n\r\n{{"
    ).encode()
    with connections(server, 8) as socks:
        for sock in socks:
            sock.sendall(head)
        assert health_within(server, 15)
        for sock in socks:
            answer = sock.recv(65536)  # an error status or a plain close, never a hang
            assert answer == b"" or answer.startswith(b"HTTP/1.1 4") or b" 500 " in answer
    assert server.get("/sessions/s/history").json()["entries"] == []  # nothing half-stored


def test_health_shows_held_requests_and_their_limits(start_iris: Start) -> None:
    server = start_iris(**TINY)
    held = server.get("/health", auth=False).json()["held"]
    assert held == {"streams": {"open": 0, "limit": 1}, "waits": {"open": 0, "limit": 1}}

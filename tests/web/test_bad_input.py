"""Bad input through HTTP: the right status, a JSON error, and nothing stored or lost."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.server import IrisServer
from tests.web.conftest import in_background

Start = Callable[..., IrisServer]


def assert_error(reply: Any, status: int, code: str | None = None) -> None:
    assert reply.status == status, reply.body
    body = reply.json()
    assert set(body) >= {"error", "code"} and body["error"]
    if code:
        assert body["code"] == code


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc", "Bearer "])
def test_missing_or_wrong_token_is_401(shared_iris_server: IrisServer, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    for path in ("/sessions/a/message", "/sessions/a/stop", "/channels/C1/events"):
        reply = shared_iris_server.post(path, json_body={"text": "x"}, headers=headers, auth=False)
        assert_error(reply, 401, "unauthorized")
    assert_error(shared_iris_server.get("/sessions/a/history", headers=headers, auth=False), 401)
    assert not (shared_iris_server.data_dir / "SESSION-a").exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "malformed_json"),
        (b"[1, 2]", "malformed_json"),
        (b"", "malformed_json"),
        (b'{"txt": "typo"}', "unknown_fields"),
        (b'{"text": "hi", "model": "x"}', "unknown_fields"),
        (b'{"attachments": []}', "missing_fields"),
        (b'{"text": 5}', "invalid_field"),
        (b'{"text": "   "}', "invalid_field"),
        (b'{"text": "hi", "attachments": "nope"}', "invalid_field"),
        (b'{"text": "hi", "attachments": null}', "invalid_field"),
        (b'{"text": "hi", "attachments": [{"url": "http://example.com/x"}]}', "invalid_attachment"),
        (
            b'{"text": "hi", "attachments": [{"local": "SESSION-a/attachments/1_nope.pdf"}]}',
            "unknown_attachment",
        ),
        (
            b'{"text": "hi", "attachments": [{"local": "SESSION-a/../../etc/passwd"}]}',
            "unknown_attachment",
        ),
        (
            b'{"text": "hi", "attachments": [{"local": "SESSION-other/attachments/1_x.pdf"}]}',
            "foreign_attachment",
        ),
    ],
)
def test_bad_message_bodies_are_400(shared_iris_server: IrisServer, body: bytes, code: str) -> None:
    reply = shared_iris_server.post(
        "/sessions/a/message", body=body, headers={"Content-Type": "application/json"}
    )
    assert_error(reply, 400, code)
    assert not (shared_iris_server.data_dir / "SESSION-a" / "log.jsonl").exists()


def test_a_handle_from_another_session_is_refused_even_when_it_exists(
    shared_iris_server: IrisServer,
) -> None:
    handle = shared_iris_server.post(
        "/sessions/owner/attachments", body=b"x", headers={"X-Filename": "a.txt"}
    ).json()["local"]
    reply = shared_iris_server.post(
        "/sessions/thief/message", json_body={"text": "hi", "attachments": [{"local": handle}]}
    )
    assert_error(reply, 400, "foreign_attachment")


@pytest.mark.parametrize(
    "name", ["../escape.txt", "a/b.txt", "..", "evil\\..\\x", "bad\x01name", "tab\tname"]
)
def test_hostile_file_names_are_400_and_nothing_is_written(
    shared_iris_server: IrisServer, name: str
) -> None:
    reply = shared_iris_server.post(
        "/sessions/a/attachments", body=b"data", headers={"X-Filename": name}
    )
    if "\x01" in name:
        assert reply.status == 400  # gunicorn itself refuses control bytes in a header
    else:
        assert_error(reply, 400)
    assert list(shared_iris_server.data_dir.rglob("*escape*")) == []
    attachments = shared_iris_server.data_dir / "SESSION-a" / "attachments"
    assert not attachments.exists() or list(attachments.iterdir()) == []


def raw_request(server: IrisServer, head: bytes, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_nul_in_the_file_name_is_400(shared_iris_server: IrisServer) -> None:
    head = (
        b"POST /sessions/a/attachments HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + shared_iris_server.token.encode() + b"\r\n"
        b"X-Filename: bad\x00name.txt\r\nContent-Length: 4\r\n\r\n"
    )
    response = raw_request(shared_iris_server, head, b"data")
    assert response.startswith(b"HTTP/1.1 400")
    attachments = shared_iris_server.data_dir / "SESSION-a" / "attachments"
    assert not attachments.exists() or list(attachments.iterdir()) == []


def test_missing_file_name_is_400(shared_iris_server: IrisServer) -> None:
    assert_error(
        shared_iris_server.post("/sessions/a/attachments", body=b"data"), 400, "missing_filename"
    )


@pytest.mark.parametrize("body", [None, b""])
def test_an_empty_upload_is_400_and_leaves_nothing(
    shared_iris_server: IrisServer, body: bytes | None
) -> None:
    """No body at all, or ``Content-Length: 0``: a forgotten ``--data-binary`` is not a file."""
    reply = shared_iris_server.post(
        "/sessions/empty/attachments", body=body, headers={"X-Filename": "nothing.txt"}
    )
    assert_error(reply, 400, "empty_attachment")
    attachments = shared_iris_server.data_dir / "SESSION-empty" / "attachments"
    assert not attachments.exists() or list(attachments.iterdir()) == []


def test_bodies_over_the_limit_are_413_and_leave_nothing(start_iris: Start) -> None:
    server = start_iris(IRIS_MAX_BODY_BYTES="2048")
    big = b"x" * 4096
    assert_error(
        server.post("/sessions/a/attachments", body=big, headers={"X-Filename": "big.bin"}),
        413,
        "payload_too_large",
    )
    reply = server.post(
        "/sessions/a/message",
        body=json.dumps({"text": "y" * 4096}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_error(reply, 413, "payload_too_large")
    # Chunked upload without a Content-Length: cut off while streaming, partial file removed.
    head = (
        b"POST /sessions/a/attachments HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + server.token.encode() + b"\r\n"
        b"X-Filename: chunked.bin\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"1000\r\n" + b"z" * 4096 + b"\r\n0\r\n\r\n"
    assert raw_request(server, head, chunk).startswith(b"HTTP/1.1 413")
    attachments = server.data_dir / "SESSION-a" / "attachments"
    assert not attachments.exists() or list(attachments.iterdir()) == []
    assert (
        server.post(
            "/sessions/a/attachments", body=b"small", headers={"X-Filename": "ok.txt"}
        ).status
        == 201
    )


@pytest.mark.parametrize("session", ["a%20b", "a..b", "-x", "%C3%BC", "a$b", "x" * 129])
def test_session_ids_outside_the_safe_charset_are_400(
    shared_iris_server: IrisServer, session: str
) -> None:
    for method, path in (
        ("POST", "message"),
        ("POST", "stop"),
        ("GET", "history"),
        ("GET", "stream"),
    ):
        reply = shared_iris_server.request(
            method,
            f"/sessions/{session}/{path}",
            json_body={"text": "x"} if method == "POST" else None,
        )
        assert_error(reply, 400, "invalid_session_id")


def test_unknown_fields_elsewhere_are_400(shared_iris_server: IrisServer) -> None:
    assert_error(
        shared_iris_server.post("/sessions/a/inject-turn", json_body={"user": "x", "extra": 1}),
        400,
        "unknown_fields",
    )
    assert_error(
        shared_iris_server.post("/sessions/a/inject-turn", json_body={}), 400, "missing_fields"
    )
    assert_error(
        shared_iris_server.post("/sessions/a/reset", json_body={"hard": True}),
        400,
        "unknown_fields",
    )
    assert_error(
        shared_iris_server.post("/channels/C1/events", json_body={"text": "x", "when": "now"}),
        400,
        "unknown_fields",
    )


def test_unknown_routes_are_json_404(shared_iris_server: IrisServer) -> None:
    assert_error(shared_iris_server.get("/nope"), 404)


def test_a_full_queue_refuses_clearly_and_loses_nothing(
    start_iris: Start, write_script: Callable[[list[dict[str, Any]]], Path]
) -> None:
    script = write_script(
        [{"when": "slow", "turns": [[{"thinking": "busy"}, {"sleep": 2}, {"text": "slow done"}]]}]
    )
    server = start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    first = in_background(lambda: server.post("/sessions/q/message", json_body={"text": "slow"}))
    time.sleep(0.5)
    waiting = []
    for i in range(5):
        waiting.append(
            in_background(
                lambda i=i: server.post("/sessions/q/message", json_body={"text": f"m{i}"})
            )
        )
        time.sleep(0.1)  # keep the queue order deterministic
    refused = [
        server.post("/sessions/q/message", json_body={"text": f"extra{i}"}) for i in range(4)
    ]
    for reply in refused:
        assert_error(reply, 429, "queue_full")
    assert first(20).json()["text"] == "slow done"
    assert sorted(w(20).json()["text"] for w in waiting) == [f"echo: m{i}" for i in range(5)]
    users = [
        e["text"]
        for e in server.get("/sessions/q/history").json()["entries"]
        if e["role"] == "user"
    ]
    assert users[0] == "slow" and sorted(users[1:]) == [f"m{i}" for i in range(5)]
    assert not any(u.startswith("extra") for u in users)


def test_a_busy_port_gives_a_clear_error(shared_iris_server: IrisServer, tmp_path: Path) -> None:
    clash = IrisServer(tmp_path / "clash", port=shared_iris_server.port)
    done = subprocess.run(
        clash.command(), env=clash.environment(), capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{shared_iris_server.port} (IRIS_API_PORT)" in done.stderr
    assert "Traceback" not in done.stderr

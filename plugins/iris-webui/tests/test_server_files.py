"""Files in and out of a conversation: uploads (size limit, hostile names), a message that
carries one, a file the agent attaches, and downloads confined to the conversation's folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import requests
from server_harness import WebIris

LIMIT = 4096


def upload(
    web: WebIris, http: requests.Session, session: str, name: str, data: bytes
) -> requests.Response:
    return http.post(
        f"{web.url}/api/sessions/{session}/uploads", files={"file": (name, data)}, timeout=30
    )


def capped_conversation(
    start_web_iris: Callable[..., WebIris], data_dir: Path
) -> tuple[WebIris, requests.Session, str]:
    """A served Web UI that takes uploads of up to ``LIMIT`` bytes, a signed-in client and a new
    conversation of it."""
    web = start_web_iris(data_dir=data_dir, IRIS_WEBUI_MAX_UPLOAD_BYTES=str(LIMIT))
    http = web.login()
    return web, http, web.new_session(http)


def test_upload_download_and_the_agent_sees_the_file(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    data_dir = tmp_path / "iris-data"
    web, http, session = capped_conversation(start_web_iris, data_dir)
    folder = data_dir / f"WEBUI-{session}"

    saved = upload(web, http, session, "notes.txt", b"the secret word is plum\n")
    assert saved.status_code == 201, saved.text
    body = saved.json()
    assert body["name"] == "notes.txt" and body["path"].startswith("attachments/")
    assert body["path"].endswith("_notes.txt")
    assert body["url"] == f"/api/sessions/{session}/{'files/' + body['path']}"
    got = http.get(web.url + body["url"], timeout=30)
    assert got.content == b"the secret word is plum\n"
    assert got.headers["Content-Disposition"].startswith("attachment")
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Type"] == "application/octet-stream"

    # The agent reads the upload, then attaches a file of its own back.
    web.rules(
        [
            {
                "when": "read my notes",
                "turns": [
                    [
                        {
                            "tool": "bash",
                            "id": "c1",
                            "args": {"command": f"cat {folder / body['path']}"},
                        }
                    ],
                    [{"tool": "bash", "id": "c2", "args": {"command": "echo report > report.md"}}],
                    [
                        {
                            "tool": "attach",
                            "id": "c3",
                            "args": {"path": "report.md", "title": "Report"},
                        }
                    ],
                    [{"text": "Here is the report."}],
                ],
            }
        ]
    )
    sock = web.connect(http, session)
    sock.recv()
    sock.send({"type": "message", "text": "read my notes", "files": [body["path"]]})
    frames = sock.final()
    assert frames[0] == {
        "type": "user",
        "text": "read my notes",
        "files": [{"name": "notes.txt", "url": body["url"]}],
    }
    cards = [f for f in frames if f["type"] == "tool" and f["phase"] == "end"]
    assert "plum" in cards[0]["result"]
    assert cards[2]["kind"] == "other" and cards[2]["subtitle"] == "report.md"
    offered = [f for f in frames if f["type"] == "file"]
    assert len(offered) == 1 and offered[0]["name"] == "report.md"
    assert http.get(web.url + offered[0]["url"], timeout=30).content == b"report\n"

    history = web.history(http, session)
    assert history[0]["files"] == [{"name": "notes.txt", "url": body["url"]}]
    assert history[1]["files"] == [{"name": "report.md", "url": offered[0]["url"]}]


def test_uploads_are_capped_and_hostile_names_neutralised(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    data_dir = tmp_path / "iris-data"
    web, http, session = capped_conversation(start_web_iris, data_dir)

    too_big = upload(web, http, session, "big.bin", b"x" * (LIMIT + 1))
    assert too_big.status_code == 413 and too_big.json()["code"] == "payload_too_large"
    way_too_big = upload(web, http, session, "huge.bin", b"x" * (LIMIT + 200_000))
    assert way_too_big.status_code == 413 and way_too_big.json()["code"] == "payload_too_large"

    # Names are capped in bytes: long Cyrillic names (2 bytes a letter) are cut, never refused.
    for name, kept in (("я" * 95 + ".txt", "я" * 88 + ".txt"), ("ж" * 200 + ".txt", None)):
        reply = upload(web, http, session, name, b"data")
        assert reply.status_code == 201, reply.text
        assert kept is None or reply.json()["name"] == kept
        assert reply.json()["name"].endswith(".txt")
        assert len(reply.json()["path"].encode()) <= len("attachments/") + 200

    for hostile in ("../../api-token", "..\\..\\evil.txt", ".bashrc", "a\x00b", "/etc/passwd"):
        reply = upload(web, http, session, hostile, b"data")
        assert reply.status_code == 201, (hostile, reply.text)
        stored = reply.json()["path"]
        assert stored.startswith("attachments/") and ".." not in stored
        assert (data_dir / f"WEBUI-{session}" / stored).read_bytes() == b"data"
    assert not (data_dir / "evil.txt").exists()
    assert sorted(p.name for p in (data_dir / f"WEBUI-{session}" / "attachments").iterdir())
    assert not [
        p
        for p in (data_dir / f"WEBUI-{session}" / "attachments").iterdir()
        if p.name.startswith(".")
    ]

    no_file = http.post(
        f"{web.url}/api/sessions/{session}/uploads", files={"other": ("x", b"1")}, timeout=30
    )
    assert no_file.status_code == 400


def test_downloads_stay_inside_the_conversation(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    data_dir = tmp_path / "iris-data"
    web = start_web_iris(data_dir=data_dir)
    http = web.login()
    mine, other = web.new_session(http), web.new_session(http)
    theirs = upload(web, http, other, "theirs.txt", b"theirs").json()

    base = f"{web.url}/api/sessions/{mine}/files/"
    for path in (
        "..%2F..%2Fapi-token",
        "..%2Fapi-token",
        "attachments/..%2F..%2Fapi-token",
        "log.jsonl",
        "attachments",
        theirs["path"],  # another conversation's upload, asked for through this one
        f"..%2FWEBUI-{other}%2F{theirs['path']}",
    ):
        reply = http.get(base + path, timeout=30)
        assert reply.status_code in {400, 404}, path
        assert b"theirs" not in reply.content and web.server.token.encode() not in reply.content
    assert http.get(web.url + theirs["url"], timeout=30).content == b"theirs"

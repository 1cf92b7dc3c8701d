"""How a tool event becomes a card (a pure function), secrets kept out of cards, and the
history rebuilt from a log that may be hostile or cut off."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from iris_webui.cards import RESULT_MAX_BYTES, tool_frame
from server_harness import WebIris, served_handmade_log

from iris_runtime.engine.transport import ToolEvent


def test_the_subtitle_prefers_description_then_paths_then_the_title() -> None:
    def subtitle(args: dict[str, object], name: str = "mcp_tool") -> str:
        return str(tool_frame(ToolEvent("start", "c", name, args))["subtitle"])

    assert subtitle({"description": "Build it", "command": "make"}) == "Build it"
    assert subtitle({"file_path": "/a/b.py", "url": "https://x"}) == "/a/b.py"
    assert subtitle({"pattern": "TODO", "path": "src"}) == "TODO"
    assert subtitle({"url": "https://example.com"}) == "https://example.com"
    assert subtitle({"path": "notes.md"}, "read") == "notes.md"
    assert subtitle({"command": "ls   -la\n"}, "bash") == "ls -la"
    assert subtitle({}, "read") == "Read a file"  # nothing else: the title
    assert subtitle({"agent": "helper", "message": "hi"}, "call_agent") == "Ask helper"


def test_results_are_truncated_for_display_and_kinds_pass_through() -> None:
    long = "é" * RESULT_MAX_BYTES
    frame = tool_frame(ToolEvent("end", "c", "read", {"path": "x"}, long, True, "read"))
    assert frame["kind"] == "read" and frame["is_error"] is True
    assert len(frame["result"].encode()) <= RESULT_MAX_BYTES and frame["result"].endswith("…")
    assert tool_frame(ToolEvent("start", "c", "x", {}))["kind"] == "other"


def test_secrets_are_redacted_from_cards_on_the_socket_and_in_the_log(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    password = "webui-password-for-the-test"  # noqa: S105 (a test's own password)
    rules = [
        {
            "when": "leak",
            "turns": [
                [
                    {
                        "tool": "bash",
                        "id": "call-leak",
                        "args": {"command": f'echo "$IRIS_API_TOKEN"; echo {password}'},
                    }
                ],
                [{"text": "Done."}],
            ],
        }
    ]
    data_dir = tmp_path / "iris-data"
    web = start_web_iris(rules, data_dir=data_dir, IRIS_WEBUI_PASSWORD=password)
    token = web.server.token
    http, session, sock = web.open_conversation()
    sock.send({"type": "message", "text": "leak it"})
    frames = sock.final()
    end = next(f for f in frames if f["type"] == "tool" and f["phase"] == "end")
    assert end["result"].split()[:2] == ["[redacted]", "[redacted]"]  # it did print both
    assert password not in json.dumps(frames) and token not in json.dumps(frames)
    assert password not in end["input"]["command"]
    history = json.dumps(web.history(http, session))
    assert "[redacted]" in history and token not in history and password not in history
    markers = [
        line
        for line in (data_dir / f"WEBUI-{session}" / "log.jsonl").read_text().splitlines()
        if "webui_tool" in line
    ]
    assert markers and not [m for m in markers if token in m or password in m]


def test_a_hostile_or_cut_off_log_still_makes_a_history(
    start_web_iris: Callable[..., WebIris], tmp_path: Path
) -> None:
    card = {"id": "c1", "name": "bash", "title": "Run a command", "result": "ok"}
    entries: list[object] = [
        {"type": "message", "role": "user", "text": "first", "ts": "1", "attachments": "x.txt"},
        {"type": "webui_tool", "card": card},
        {"type": "webui_file", "name": ["odd"], "path": "files/a.txt"},
        # No reply: the run was cut off (a crash), and the next message arrived.
        {"type": "message", "role": "user", "text": "second", "ts": {"a": 1}, "attachments": 7},
        {"type": "message", "role": ["user"], "text": "unhashable role"},
        {"type": "message", "role": "assistant", "text": 5, "status": [], "agent": 3},
        {"type": "webui_post", "id": ["x"], "text": "posted"},
        {"type": "webui_tool", "card": "not a card"},
        [1, 2, 3],
        "just a string",
        {"type": "webui_tool", "card": card},  # trailing, and nothing runs the channel now
    ]
    log_text = "\n".join(json.dumps(e) for e in entries) + "\n{not json\n"
    web, http = served_handmade_log(start_web_iris, tmp_path / "iris-data", log_text)
    messages = web.history(http, "handmade")
    assert [(m["role"], m["text"], m.get("status")) for m in messages] == [
        ("user", "first", None),
        ("assistant", "", "error"),  # the interrupted turn keeps its card and file
        ("user", "second", None),
        # (the assistant entry with a number for text is an empty, silent reply: not shown)
        ("assistant", "posted", None),
        ("assistant", "", "error"),  # trailing cards: not "running", nothing runs
    ]
    assert messages[1]["tools"] == [card] and messages[1]["files"][0]["name"] == ""
    assert messages[0]["files"] == [] and messages[2]["ts"] is None
    listed = http.get(f"{web.url}/api/sessions", timeout=30)
    assert listed.status_code == 200 and listed.json()[0]["title"] == "first"

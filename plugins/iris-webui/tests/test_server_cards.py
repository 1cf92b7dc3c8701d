"""How a tool event becomes a card (no server needed: the frame is a pure function)."""

from __future__ import annotations

from iris_webui.cards import RESULT_MAX_BYTES, tool_frame

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

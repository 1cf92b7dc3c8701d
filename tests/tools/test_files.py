"""read, write and edit on real files, including attempts to leave the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iris_runtime.engine.tools import ToolContext
from iris_runtime.errors import InvalidInput
from iris_runtime.tools.files import EditTool, ReadTool, WriteTool
from iris_runtime.tools.workspace import confine

ESCAPES = ["../outside.txt", "/etc/passwd", "link/outside.txt", "link", "a\0b"]


@pytest.fixture
def outside(ctx: ToolContext) -> Path:
    """A directory next to the workspace, reachable from inside only via the ``link`` symlink."""
    directory = ctx.workspace.parent / "outside"
    directory.mkdir()
    (directory / "outside.txt").write_text("secret\n")
    os.symlink(directory, ctx.workspace / "link")
    return directory


def test_confine_accepts_relative_and_absolute_inside(ctx: ToolContext) -> None:
    inside = ctx.workspace.resolve() / "sub" / "f.txt"
    assert confine(ctx.workspace, "sub/f.txt") == inside
    assert confine(ctx.workspace, str(inside)) == inside
    assert confine(ctx.workspace, "sub/../sub/f.txt") == inside


@pytest.mark.parametrize("user_path", ["../x", "/etc/passwd", "link/x", "a\0b"])
def test_confine_refuses_escapes(ctx: ToolContext, outside: Path, user_path: str) -> None:
    with pytest.raises(InvalidInput) as info:
        confine(ctx.workspace, user_path)
    assert info.value.code == "outside_workspace"


def test_write_then_read(ctx: ToolContext) -> None:
    result = WriteTool().run({"path": "deep/dir/a.txt", "content": "héllo\nworld\n"}, ctx)
    assert not result.is_error
    assert result.text == "wrote 13 bytes to deep/dir/a.txt"
    assert (ctx.workspace / "deep/dir/a.txt").read_text() == "héllo\nworld\n"
    assert ReadTool().run({"path": "deep/dir/a.txt"}, ctx).text == "héllo\nworld\n"


def test_write_leaves_no_temp_files_and_keeps_mode(ctx: ToolContext) -> None:
    target = ctx.workspace / "script.sh"
    target.write_text("old")
    target.chmod(0o750)
    WriteTool().run({"path": "script.sh", "content": "new"}, ctx)
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in ctx.workspace.iterdir()) == ["script.sh"]


def test_read_offset_and_limit(ctx: ToolContext) -> None:
    (ctx.workspace / "n.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    result = ReadTool().run({"path": "n.txt", "offset": 3, "limit": 2}, ctx)
    assert (
        result.text == "line 3\nline 4\n\n[showing lines 3-4 of 10; use offset=5 to read further]"
    )
    assert ReadTool().run({"path": "n.txt", "offset": 10}, ctx).text == "line 10\n"
    assert ReadTool().run({"path": "n.txt", "offset": 11}, ctx).is_error


def test_read_truncates_big_file_with_hint(ctx: ToolContext) -> None:
    (ctx.workspace / "big.txt").write_text("".join(f"{n:09d}\n" for n in range(100)))
    result = ReadTool().run({"path": "big.txt"}, ctx)
    assert result.text.startswith("000000000\n")
    assert result.text.endswith("[showing lines 1-20 of 100; use offset=21 to read further]")
    follow = ReadTool().run({"path": "big.txt", "offset": 21}, ctx)
    assert follow.text.startswith("000000020\n")


def test_read_one_huge_line(ctx: ToolContext) -> None:
    (ctx.workspace / "wide.txt").write_text("x" * 1000 + "\nnext\n")
    result = ReadTool().run({"path": "wide.txt"}, ctx)
    assert result.text.startswith("x" * 200 + "\n[line 1 is longer than 200")
    assert "offset=2" in result.text


def test_read_replaces_invalid_utf8(ctx: ToolContext) -> None:
    (ctx.workspace / "bin").write_bytes(b"ok\xff\r\n")
    assert ReadTool().run({"path": "bin"}, ctx).text == "ok\ufffd\r\n"


def test_read_refuses_directory_missing_and_huge(ctx: ToolContext) -> None:
    (ctx.workspace / "d").mkdir()
    with (ctx.workspace / "huge").open("wb") as fh:
        fh.truncate(10 * 1024 * 1024 + 1)
    assert "directory" in ReadTool().run({"path": "d"}, ctx).text
    assert "no such file" in ReadTool().run({"path": "nope"}, ctx).text
    huge = ReadTool().run({"path": "huge"}, ctx)
    assert huge.is_error and "refused" in huge.text


@pytest.mark.parametrize("user_path", ESCAPES)
def test_read_refuses_escapes(ctx: ToolContext, outside: Path, user_path: str) -> None:
    result = ReadTool().run({"path": user_path}, ctx)
    assert result.is_error
    assert "secret" not in result.text


@pytest.mark.parametrize("user_path", ESCAPES)
def test_write_refuses_escapes(ctx: ToolContext, outside: Path, user_path: str) -> None:
    result = WriteTool().run({"path": user_path, "content": "pwned"}, ctx)
    assert result.is_error
    assert (outside / "outside.txt").read_text() == "secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["outside.txt"]
    assert not (ctx.workspace.parent / "outside.txt").exists()


def test_write_refuses_new_file_through_symlink(ctx: ToolContext, outside: Path) -> None:
    result = WriteTool().run({"path": "link/new.txt", "content": "pwned"}, ctx)
    assert result.is_error
    assert not (outside / "new.txt").exists()


def test_edit_replaces_single_occurrence(ctx: ToolContext) -> None:
    target = ctx.workspace / "e.txt"
    target.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    result = EditTool().run({"path": "e.txt", "old_text": "beta", "new_text": "BETA"}, ctx)
    assert not result.is_error
    assert target.read_bytes() == b"alpha\r\nBETA\r\ngamma\r\n"
    assert sorted(p.name for p in ctx.workspace.iterdir()) == ["e.txt"]


@pytest.mark.parametrize(("old", "count"), [("zeta", 0), ("a\n", 2)])
def test_edit_requires_exactly_one(ctx: ToolContext, old: str, count: int) -> None:
    target = ctx.workspace / "e.txt"
    target.write_text("alpha\nbeta\n")
    result = EditTool().run({"path": "e.txt", "old_text": old, "new_text": "X"}, ctx)
    assert result.is_error
    assert f"occurs {count} times" in result.text
    assert target.read_text() == "alpha\nbeta\n"


def test_edit_refuses_non_utf8_and_empty_old_text(ctx: ToolContext) -> None:
    (ctx.workspace / "bin").write_bytes(b"\xff\xfe")
    (ctx.workspace / "t").write_text("t")
    assert EditTool().run({"path": "bin", "old_text": "x", "new_text": "y"}, ctx).is_error
    assert EditTool().run({"path": "t", "old_text": "", "new_text": "y"}, ctx).is_error
    assert (ctx.workspace / "bin").read_bytes() == b"\xff\xfe"


@pytest.mark.parametrize("user_path", ESCAPES)
def test_edit_refuses_escapes(ctx: ToolContext, outside: Path, user_path: str) -> None:
    args = {"path": user_path, "old_text": "secret", "new_text": "pwned"}
    assert EditTool().run(args, ctx).is_error
    assert (outside / "outside.txt").read_text() == "secret\n"

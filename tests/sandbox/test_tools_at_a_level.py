"""The bash and file tools at an isolating level, called directly: the same contract as on the
host (timeout and Stop kill everything, output caps), and the file tools see exactly the
workspace the command sees."""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from pathlib import Path

import pytest

from iris_runtime.engine.tools import ToolContext
from iris_runtime.tools.attach import AttachTool
from iris_runtime.tools.bash import BashTool
from iris_runtime.tools.files import EditTool, ReadTool, WriteTool
from iris_runtime.tools.sandbox import Sandbox, open_sandbox
from iris_runtime.tools.sandbox.levels import BUILT_IN_LEVELS
from tests.sandbox.support import require_tools

LEVELS = ["namespace", "gvisor:ptrace"]


def _open(level: str, data_dir: Path) -> Sandbox:
    if level.startswith("gvisor"):
        if os.geteuid() != 0:
            pytest.skip("runsc runs as root")
        require_tools("runsc")
    else:
        require_tools("bwrap")
        if os.geteuid() == 0:
            pytest.skip("namespace refuses to run as root (test_namespace runs it unprivileged)")
    return open_sandbox(level, BUILT_IN_LEVELS, data_dir, {})


def _context(data_dir: Path, level: str, sandbox: Sandbox | None) -> ToolContext:
    """The tools' context in ``data_dir`` at ``level``, run by ``sandbox`` (None: the level is
    not open here)."""
    return ToolContext(
        workspace=data_dir,
        channel_dir=data_dir / "chan",
        abort=threading.Event(),
        upload_file=lambda path, title: None,
        sandbox=level,
        sandboxes={} if sandbox is None else {level: sandbox},
    )


@pytest.fixture(params=LEVELS)
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> ToolContext:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "api-token").write_text("secret-token\n")
    (data_dir / "MEMORY.md").write_text("remember this\n")
    made = _context(data_dir, request.param, _open(request.param, data_dir))
    made.timeout_seconds, made.output_max_chars = 30, 2000
    return made


def _running(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def test_timeout_kills_everything_the_command_started(ctx: ToolContext) -> None:
    # Two sleeps, one in the background: both must be gone when the tool returns.
    result = BashTool().run({"command": "sleep 971 & sleep 972; echo never", "timeout": 1}, ctx)
    assert result.is_error and result.text.endswith("killed: timed out after 1s")
    assert _running("sleep 97[12]") == []
    # Under gVisor the sleeps are the Sentry's, not host processes: its sandbox must be gone.
    assert _running(f"runsc.*{ctx.workspace}") == []


def test_stop_kills_the_command(ctx: ToolContext) -> None:
    threading.Timer(1.0, ctx.abort.set).start()
    result = BashTool().run({"command": "sleep 973"}, ctx)
    assert result.text.endswith("killed: stopped")
    assert _running("sleep 973") == []
    assert _running(f"runsc.*{ctx.workspace}") == []


def test_output_cap_and_saved_full_output(ctx: ToolContext) -> None:
    result = BashTool().run({"command": "seq 1 5000; echo err >&2"}, ctx)
    assert result.text.startswith("[output truncated")
    # Named as the command sees it, and reachable by the read tool and by the command.
    shown = result.details["full_output"]
    assert shown.startswith("/workspace/") and shown in result.text
    whole = ReadTool().run({"path": shown, "limit": 1}, ctx)
    assert whole.text.startswith("1\n"), whole.text
    last = ReadTool().run({"path": shown, "offset": 5001}, ctx)
    assert last.text == "err\n"  # stdout and stderr, in order
    assert BashTool().run({"command": f"tail -n 1 {shown}"}, ctx).text.startswith("err")


def test_file_tools_see_the_commands_workspace(ctx: ToolContext) -> None:
    work = ctx.workspace / "work"
    wrote = WriteTool().run({"path": "notes/a.txt", "content": "from write\n"}, ctx)
    assert not wrote.is_error, wrote.text
    assert (work / "notes" / "a.txt").read_text() == "from write\n"
    seen = BashTool().run({"command": "cat /workspace/notes/a.txt; echo made > b.txt"}, ctx)
    assert seen.text.startswith("from write"), seen.text
    assert ReadTool().run({"path": "/workspace/b.txt"}, ctx).text == "made\n"
    edited = EditTool().run({"path": "b.txt", "old_text": "made", "new_text": "edited"}, ctx)
    assert not edited.is_error
    again = BashTool().run({"command": "cat b.txt"}, ctx)
    assert again.text.startswith("edited")
    # The agent's memory is readable at /agent, by the command and the tools, never writable.
    assert BashTool().run({"command": "cat /agent/MEMORY.md"}, ctx).text.startswith("remember")
    assert ReadTool().run({"path": "/agent/MEMORY.md"}, ctx).text == "remember this\n"
    refused = WriteTool().run({"path": "/agent/MEMORY.md", "content": "x"}, ctx)
    assert refused.is_error and "read-only" in refused.text
    assert BashTool().run({"command": "echo x >> /agent/MEMORY.md"}, ctx).is_error


def test_file_tools_refuse_what_the_command_cannot_see(ctx: ToolContext) -> None:
    token = ctx.workspace / "api-token"
    for path in (str(token), "../api-token", "/workspace/../api-token", "/etc/passwd"):
        result = ReadTool().run({"path": path}, ctx)
        assert result.is_error and "outside the workspace" in result.text, path
    assert WriteTool().run({"path": "../escape.txt", "content": "x"}, ctx).is_error
    assert not (ctx.workspace / "escape.txt").exists()
    attached = AttachTool().run({"path": str(token)}, ctx)
    assert attached.is_error
    assert "secret-token" not in BashTool().run({"command": f"cat {token}"}, ctx).text


def test_switching_levels_hands_the_work_folder_over(tmp_path: Path) -> None:
    """gVisor's commands write as uid 10000 on the host, namespace's as Iris's own uid: after a
    switch the next level's commands can still change what the last one's made."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    first = _open("gvisor:ptrace", data_dir)
    ctx = _context(data_dir, "gvisor:ptrace", first)
    assert not BashTool().run({"command": "mkdir -p d && echo one > d/f"}, ctx).is_error
    second = _open("namespace", data_dir)
    ctx.sandbox, ctx.sandboxes = "namespace", {"namespace": second}
    result = BashTool().run({"command": "echo two >> d/f && cat d/f"}, ctx)
    assert result.text == "one\ntwo\nexit code 0"


def _swap_forever(work: Path, data_dir: Path, stop: threading.Event, swaps: list[int]) -> None:
    """What a sandboxed command can do to its own work folder: swap ``real`` between a folder and
    a symlink to Iris's data dir (atomically, so ``real`` always exists), as fast as it can."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    real, link = bytes(work / "real"), bytes(work / "link")
    os.symlink(data_dir, link)
    while not stop.is_set():
        if libc.renameat2(at_fdcwd, real, at_fdcwd, link, rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        swaps[0] += 1


def test_file_tools_never_follow_a_swapped_symlink(ctx: ToolContext) -> None:
    """A command racing the tools (folder <-> symlink to the data dir) never gets them to read
    Iris's token or write into the data dir."""
    work = ctx.workspace / "work"
    (work / "real").mkdir(parents=True)
    (work / "real" / "api-token").write_text("decoy\n")
    (work / "real" / "note.txt").write_text("decoy\n")
    (ctx.workspace / "note.txt").write_text("data dir note\n")
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swap_forever, args=(work, ctx.workspace, stop, swaps))
    swapper.start()
    leaks: list[str] = []
    try:
        for i in range(1500):
            text = ReadTool().run({"path": "real/api-token"}, ctx).text
            if "secret-token" in text:
                leaks.append(f"read {i}")
            WriteTool().run({"path": "real/note.txt", "content": "x\n"}, ctx)
            EditTool().run({"path": "real/note.txt", "old_text": "x", "new_text": "x"}, ctx)
            if (ctx.workspace / "note.txt").read_text() != "data dir note\n":
                leaks.append(f"write {i}")
                (ctx.workspace / "note.txt").write_text("data dir note\n")
    finally:
        stop.set()
        swapper.join()
    assert swaps[0] > 100
    assert leaks == []
    assert not [p for p in ctx.workspace.iterdir() if p.name.startswith(".note.txt")]


def test_file_tools_refuse_when_the_level_is_missing(tmp_path: Path) -> None:
    """As bash does: a level not available here never falls back to the host's data dir."""
    (tmp_path / "api-token").write_text("secret-token\n")
    ctx = _context(tmp_path, "gvisor", None)
    for result in (
        ReadTool().run({"path": "api-token"}, ctx),
        WriteTool().run({"path": "x.txt", "content": "x"}, ctx),
        AttachTool().run({"path": "api-token"}, ctx),
        BashTool().run({"command": "cat api-token"}, ctx),
    ):
        assert result.is_error and "secret-token" not in result.text, result.text
    assert not (tmp_path / "x.txt").exists()


def test_the_command_can_change_what_the_file_tools_made(ctx: ToolContext) -> None:
    """gVisor's and Docker's commands are uid 10000 on the host: what write and edit make (files
    and new folders) is handed to that uid, so the command can change and remove it."""
    assert not WriteTool().run({"path": "deep/er/a.txt", "content": "one\n"}, ctx).is_error
    edited = EditTool().run({"path": "deep/er/a.txt", "old_text": "one", "new_text": "1"}, ctx)
    assert not edited.is_error, edited.text
    command = "echo two >> deep/er/a.txt && touch deep/er/b && rm -r deep && echo gone"
    result = BashTool().run({"command": command}, ctx)
    assert result.text.startswith("gone"), result.text

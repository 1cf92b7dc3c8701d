"""The bash tool against real subprocesses."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

from iris_runtime.engine.tools import ToolContext
from iris_runtime.tools.bash import BashTool


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # An orphaned zombie still answers kill(0) until init reaps it; it is dead all the same.
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _wait_dead(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_output_and_exit_code(ctx: ToolContext) -> None:
    result = BashTool().run({"command": "echo hello; echo oops >&2"}, ctx)
    assert not result.is_error
    assert result.text == "hello\noops\nexit code 0"
    assert result.details == {"exit_code": 0, "full_output": None}
    assert list((ctx.channel_dir / "tool-output").iterdir()) == []


def test_nonzero_exit_is_error(ctx: ToolContext) -> None:
    result = BashTool().run({"command": "echo failing; exit 3"}, ctx)
    assert result.is_error
    assert result.text.endswith("exit code 3")
    assert result.details["exit_code"] == 3


def test_runs_in_workspace(ctx: ToolContext) -> None:
    result = BashTool().run({"command": "pwd; touch made-here"}, ctx)
    assert result.text.splitlines()[0] == str(ctx.workspace)
    assert (ctx.workspace / "made-here").exists()


def test_output_dir_is_private(ctx: ToolContext) -> None:
    BashTool().run({"command": "true"}, ctx)
    assert (ctx.channel_dir / "tool-output").stat().st_mode & 0o777 == 0o700


def test_timeout_kills_grandchild(ctx: ToolContext) -> None:
    started = time.monotonic()
    result = BashTool().run({"command": "sleep 30 & echo $! > pid; wait", "timeout": 0.5}, ctx)
    assert time.monotonic() - started < 4
    assert result.is_error
    assert result.text.endswith("killed: timed out after 0.5s")
    assert _wait_dead(int((ctx.workspace / "pid").read_text()))


def test_timeout_kills_nested_shell(ctx: ToolContext) -> None:
    command = "bash -c 'echo $$ > pid; sleep 30'"
    result = BashTool().run({"command": command, "timeout": 0.5}, ctx)
    assert "timed out" in result.text
    assert _wait_dead(int((ctx.workspace / "pid").read_text()))


def test_timeout_argument_is_capped(ctx: ToolContext) -> None:
    short = dataclasses.replace(ctx, timeout_seconds=0.3)
    result = BashTool().run({"command": "sleep 30", "timeout": 100}, short)
    assert result.text.endswith("killed: timed out after 0.3s")


def test_term_ignoring_process_is_killed(ctx: ToolContext) -> None:
    command = "trap '' TERM; echo $$ > pid; while true; do sleep 0.1; done"
    started = time.monotonic()
    result = BashTool().run({"command": command, "timeout": 0.3}, ctx)
    assert 2 <= time.monotonic() - started < 5  # SIGKILL only after the grace period
    assert result.is_error
    assert _wait_dead(int((ctx.workspace / "pid").read_text()))


def test_abort_stops_quickly(ctx: ToolContext) -> None:
    timer = threading.Timer(0.3, ctx.abort.set)
    timer.start()
    started = time.monotonic()
    try:
        result = BashTool().run({"command": "sleep 30"}, ctx)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 2
    assert result.is_error
    assert "killed: stopped" in result.text


def test_already_aborted_does_not_run(ctx: ToolContext) -> None:
    ctx.abort.set()
    result = BashTool().run({"command": "touch ran"}, ctx)
    assert result.is_error
    assert not (ctx.workspace / "ran").exists()


def test_truncation_keeps_tail_and_full_file(ctx: ToolContext) -> None:
    result = BashTool().run({"command": "seq 1 1000"}, ctx)
    full = Path(result.details["full_output"])
    expected = "".join(f"{n}\n" for n in range(1, 1001))
    assert full.read_text() == expected
    assert full.parent == ctx.channel_dir / "tool-output"
    first, _, rest = result.text.partition("\n")
    cut = len(expected) - 200
    assert first == f"[output truncated: first {cut} characters cut; full output in {full}]"
    assert rest == expected[-200:].removesuffix("\n") + "\nexit code 0"
    assert "1000\nexit code 0" in result.text


def test_unknown_sandbox_level_is_refused(ctx: ToolContext) -> None:
    jailed = dataclasses.replace(ctx, sandbox="docker")
    result = BashTool().run({"command": "touch ran"}, jailed)
    assert result.is_error
    assert "docker" in result.text and "not available" in result.text
    assert not (ctx.workspace / "ran").exists()


def test_non_positive_timeout_is_refused(ctx: ToolContext) -> None:
    assert BashTool().run({"command": "true", "timeout": 0}, ctx).is_error

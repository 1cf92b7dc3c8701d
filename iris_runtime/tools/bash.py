"""The ``bash`` tool: run a shell command in the workspace, killable as a whole process group.

Output goes to a file rather than a pipe so a chatty command can never block on a full pipe and
so the full output survives truncation for the model to read back in pieces.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.errors import InvalidInput
from iris_runtime.tools.sandbox.base import Launch, Sandbox
from iris_runtime.tools.sandbox.context import launch_command, sandbox_of
from iris_runtime.tools.workspace import parent_folder

# Where an isolated level's saved full output goes, in the work folder (the command's view).
VIEW_OUTPUT_DIR = ".iris/tool-output"

_POLL_SECONDS = 0.05
_KILL_GRACE_SECONDS = 2.0
_READ_CHUNK = 1 << 20


class BashTool:
    name = "bash"
    kind = "execute"  # its tool-card category (engine.tools.TOOL_KINDS)
    description = (
        "Run a bash command in the workspace directory. stdout and stderr are merged; long output "
        "keeps its end and names a file holding all of it. Returns the exit code."
    )

    def __init__(self) -> None:
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command line to run."},
                "timeout": {
                    "type": "number",
                    "description": "Seconds before the command is killed (capped by the runtime).",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        # An unknown level is refused rather than silently run unsandboxed.
        sandbox = sandbox_of(ctx)
        if sandbox is None:
            known = ", ".join(sorted(ctx.sandboxes)) or "none"
            return ToolResult(
                f"sandbox level {ctx.sandbox!r} is not available (installed: {known})",
                is_error=True,
            )
        timeout = args.get("timeout", ctx.timeout_seconds)
        if timeout <= 0:
            return ToolResult("timeout must be a positive number of seconds", is_error=True)
        if ctx.abort.is_set():
            return ToolResult("not run: stopped", is_error=True)
        out_path = _new_output_file(ctx.channel_dir)
        try:
            launch = launch_command(sandbox, ["bash", "-c", args["command"]], ctx)
            returncode, reason = _run(launch, ctx, min(timeout, ctx.timeout_seconds), out_path)
        except OSError as exc:
            out_path.unlink(missing_ok=True)
            return ToolResult(f"bash could not start: {exc}", is_error=True)
        result = _result(out_path, returncode, reason, ctx.output_max_chars)
        if sandbox.isolated and result.details.get("full_output"):
            result = _shown_in_view(sandbox, out_path, result)
        return result


def _shown_in_view(sandbox: Sandbox, out_path: Path, result: ToolResult) -> ToolResult:
    """At an isolated level the command and the file tools see only the work folder: move the
    saved full output there (``.iris/tool-output``, written without following a symlink) and
    name it as they see it."""
    work = sandbox.view.root.host
    name = out_path.name
    target = work.resolve() / VIEW_OUTPUT_DIR / name
    try:
        with parent_folder(work, target, name, create=True) as (folder, last):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(last, flags, 0o644, dir_fd=folder)
            with os.fdopen(fd, "wb") as out, out_path.open("rb") as source:
                shutil.copyfileobj(source, out)
    except (OSError, InvalidInput):
        return result  # kept in the channel folder, named by its host path
    out_path.unlink(missing_ok=True)
    shown = f"{sandbox.view.root.inside}/{VIEW_OUTPUT_DIR}/{name}"
    return ToolResult(
        result.text.replace(str(out_path), shown, 1),
        is_error=result.is_error,
        details={**result.details, "full_output": shown},
    )


def _new_output_file(channel_dir: Path) -> Path:
    directory = channel_dir / "tool-output"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="bash-", suffix=".log", dir=directory)
    os.close(fd)
    return Path(name)


def _run(
    launch: Launch, ctx: ToolContext, timeout: float, out_path: Path
) -> tuple[int, str | None]:
    """Run to completion, or kill on abort/timeout; returns (returncode, kill reason or None)."""
    try:
        return _run_launched(launch, ctx, timeout, out_path)
    finally:
        if launch.cleanup is not None:
            launch.cleanup()


def _run_launched(
    launch: Launch, ctx: ToolContext, timeout: float, out_path: Path
) -> tuple[int, str | None]:
    # Append mode: gVisor writes stdout and stderr through separate offsets otherwise.
    with out_path.open("ab") as out:
        proc = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=launch.env,
            pass_fds=launch.pass_fds,
            start_new_session=True,  # own process group, so killpg reaches grandchildren
        )
    deadline = time.monotonic() + timeout
    reason: str | None = None
    try:
        while proc.poll() is None:
            if ctx.abort.is_set():
                reason = "stopped"
            elif time.monotonic() >= deadline:
                reason = f"timed out after {timeout:g}s"
            if reason:
                _kill(proc, launch)
                break
            ctx.abort.wait(_POLL_SECONDS)  # wakes at once when abort is set
    except BaseException:
        _kill(proc, launch)
        raise
    return proc.wait(), reason


def _kill(proc: subprocess.Popen[bytes], launch: Launch) -> None:
    _kill_group(proc)
    if launch.kill is not None:  # what runs in a container or VM, beyond the process group
        launch.kill()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    pgid = proc.pid  # start_new_session made the child its group's leader
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + _KILL_GRACE_SECONDS
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so its zombie doesn't count as alive
        if not _group_alive(pgid):
            return
        time.sleep(_POLL_SECONDS)
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group.

    killpg(pgid, 0) alone also counts zombies of orphaned grandchildren, which linger until init
    reaps them; /proc tells them apart where it exists.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return True
    return any(_live_member(entry, pgid) for entry in proc_root.iterdir() if entry.name.isdigit())


def _live_member(entry: Path, pgid: int) -> bool:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return False
    # The command name may contain spaces or parentheses; fields after its last ")" are fixed.
    fields = stat.rpartition(")")[2].split()
    return len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z"


def _result(out_path: Path, returncode: int, reason: str | None, max_chars: int) -> ToolResult:
    total, tail = _read_tail(out_path, max_chars)
    cut = total - len(tail)
    parts: list[str] = []
    if cut:
        parts.append(f"[output truncated: first {cut} characters cut; full output in {out_path}]")
    else:
        out_path.unlink(missing_ok=True)
    if tail:
        parts.append(tail.removesuffix("\n"))
    parts.append(f"killed: {reason}" if reason else f"exit code {returncode}")
    return ToolResult(
        "\n".join(parts),
        is_error=reason is not None or returncode != 0,
        details={"exit_code": returncode, "full_output": str(out_path) if cut else None},
    )


def _read_tail(path: Path, max_chars: int) -> tuple[int, str]:
    """(total characters, last ``max_chars`` of them) without holding the whole file in memory."""
    total = 0
    tail = ""
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        while chunk := fh.read(_READ_CHUNK):
            total += len(chunk)
            combined = tail + chunk
            tail = combined[max(0, len(combined) - max_chars) :]
    return total, tail

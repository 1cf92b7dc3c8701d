"""What a sandbox level costs per command: the bash tool running ``true`` and a command that prints
1 MB, at every level that runs on this machine, p50 and the ratio against ``host`` in one run.

The bash tool is called directly (the same ToolContext a run gives it), so the figure is the
level's own cost: bubblewrap's namespaces, gVisor's sandbox start, ``docker exec``. Levels take
turns command by command so drift on a shared machine weighs on all of them alike. A level that
cannot run here (no bwrap, no runsc, not root) is reported on stderr and left out; ``docker`` is
measured when ``--docker-container NAME`` names a running container showing
``<--docker-data-dir>/work`` at /workspace (started as docs/sandbox.md says); Firecracker cannot
boot on this kind of machine (a nested microVM).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cli import bench_parser, run_main
from _figures import emit, percentile
from _servers import temp_workdir

from iris_runtime.engine.tools import ToolContext
from iris_runtime.tools.bash import BashTool
from iris_runtime.tools.sandbox import Sandbox, SandboxUnavailable, open_sandbox
from iris_runtime.tools.sandbox.levels import BUILT_IN_LEVELS

BENCH = "sandbox_overhead"
COMMANDS = {"true": "true", "output_1mb": "head -c 1000000 /dev/zero | tr '\\0' a"}


def _levels(
    data_dir: Path, docker_container: str | None, docker_data_dir: Path | None
) -> dict[str, Sandbox]:
    wanted = ["host", "namespace", "gvisor:ptrace"]
    if docker_container:
        wanted.append(f"docker:{docker_container}")
    opened: dict[str, Sandbox] = {}
    for level in wanted:
        own = _own_data_dir(data_dir, level, docker_data_dir)
        own.mkdir(mode=0o700, exist_ok=True)
        try:
            opened[level] = open_sandbox(level, BUILT_IN_LEVELS, own, {})
        except SandboxUnavailable as exc:
            print(f"{BENCH}: {level} left out: {exc.message}", file=sys.stderr)
    return opened


def _own_data_dir(data_dir: Path, level: str, docker_data_dir: Path | None) -> Path:
    """Levels own their work folder differently: each gets a data dir of its own (the docker
    level the one its container was started with)."""
    if level.startswith("docker:") and docker_data_dir is not None:
        return docker_data_dir
    return data_dir / level.replace(":", "-")


def _context(data_dir: Path, level: str, sandbox: Sandbox) -> ToolContext:
    return ToolContext(
        workspace=data_dir,
        channel_dir=data_dir / "bench-channel",
        abort=threading.Event(),
        upload_file=lambda path, title: None,
        timeout_seconds=120,
        sandbox=level,
        sandboxes={level: sandbox},
    )


def _time_one(tool: BashTool, command: str, ctx: ToolContext) -> float:
    started = time.perf_counter()
    result = tool.run({"command": command}, ctx)
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise RuntimeError(f"{ctx.sandbox}: {command!r} failed: {result.text[-300:]}")
    return elapsed


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--runs", type=int, default=30, help="commands per level and kind")
    parser.add_argument("--docker-container", help="also measure docker:<this container>")
    parser.add_argument(
        "--docker-data-dir", type=Path, help="the data dir whose work folder it shows"
    )
    args = parser.parse_args()
    with temp_workdir() as workdir:
        data_dir = workdir / "data"
        data_dir.mkdir(mode=0o700)
        levels = _levels(data_dir, args.docker_container, args.docker_data_dir)
        contexts = {
            level: _context(_own_data_dir(data_dir, level, args.docker_data_dir), level, sandbox)
            for level, sandbox in levels.items()
        }
        tool = BashTool()
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(2):  # warm-up: first gVisor start, page cache
            for ctx in contexts.values():
                _time_one(tool, "true", ctx)
        for _ in range(args.runs):
            for kind, command in COMMANDS.items():
                for level, ctx in contexts.items():
                    times.setdefault((level, kind), []).append(_time_one(tool, command, ctx))
        for kind in COMMANDS:
            baseline = percentile(times[("host", kind)], 50) * 1000
            for level in contexts:
                p50 = percentile(times[(level, kind)], 50) * 1000
                name = level.replace(":", "_")
                emit(BENCH, f"{name}_{kind}_p50", p50, "ms", baseline)
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

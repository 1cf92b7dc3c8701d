"""Run every benchmark in this folder (``bench/*.py`` except ``_*`` and this file).

Each bench runs as a subprocess with this interpreter; its stdout (JSON lines) and stderr pass
straight through. Options given here (e.g. ``--seconds 5``) are forwarded to every bench. Exits
non-zero at the end if any bench failed or timed out.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(
        path for path in HERE.glob("*.py") if not path.name.startswith("_") and path.resolve() != me
    )


def run_bench(path: Path, argv: list[str], timeout: float) -> int:
    """Run one bench; on timeout SIGTERM it (so it stops its servers), then SIGKILL."""
    process = subprocess.Popen([sys.executable, str(path), *argv])
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{path.stem}: timed out after {timeout:g} s", file=sys.stderr)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=None, help="forwarded to each bench (load duration)"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="per-bench timeout in seconds [900]"
    )
    parser.add_argument("--only", action="append", default=[], help="run only this bench name")
    args = parser.parse_args()

    forwarded = [] if args.seconds is None else ["--seconds", str(args.seconds)]
    selected = [p for p in benches() if not args.only or p.stem in args.only]
    if not selected:
        print("no benches selected", file=sys.stderr)
        return 2
    failures: list[str] = []
    for path in selected:
        print(f"== {path.stem}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        code = run_bench(path, forwarded, args.timeout)
        print(
            f"== {path.stem}: exit {code} in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if code != 0:
            failures.append(path.stem)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

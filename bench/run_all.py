"""Run every benchmark in this folder (``bench/*.py`` except ``_*`` and this file).

Each bench runs as a subprocess with this interpreter; its stdout (JSON lines) and stderr pass
straight through. Options given here (e.g. ``--seconds 5``) are forwarded to every bench. At the
end every figure is printed again on stderr as one Markdown table, headed by the date and the
machine, ready for the table in ``bench/README.md``. Exits non-zero at the end if any bench failed
or timed out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def benches() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(
        path for path in HERE.glob("*.py") if not path.name.startswith("_") and path.resolve() != me
    )


def _relay(stream: Any, figures: list[dict[str, Any]]) -> None:
    """Pass the bench's stdout through, keeping every JSON figure line."""
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        try:
            figure = json.loads(line)
        except ValueError:
            continue
        if isinstance(figure, dict) and "metric" in figure:
            figures.append(figure)


def run_bench(path: Path, argv: list[str], timeout: float, figures: list[dict[str, Any]]) -> int:
    """Run one bench; on timeout SIGTERM it (so it stops its servers), then SIGKILL."""
    process = subprocess.Popen(
        [sys.executable, str(path), *argv], stdout=subprocess.PIPE, text=True
    )
    relay = threading.Thread(target=_relay, args=(process.stdout, figures), daemon=True)
    relay.start()
    try:
        code = process.wait(timeout=timeout)
        relay.join(10)
        return code
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
    figures: list[dict[str, Any]] = []
    for path in selected:
        print(f"== {path.stem}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        code = run_bench(path, forwarded, args.timeout, figures)
        print(
            f"== {path.stem}: exit {code} in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if code != 0:
            failures.append(path.stem)
    print(table(figures), file=sys.stderr)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores{', ' + model if model else ''}, {platform.platform()}"


def _cell(value: object) -> str:
    return "—" if value is None else str(value)


def table(figures: list[dict[str, Any]]) -> str:
    """Every figure as one Markdown table, headed by when and where it was measured."""
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    lines = [
        f"\nMeasured {today} on {machine()}:\n",
        "| bench | metric | value | unit | baseline | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        cells = (f.get("bench"), f.get("metric"), f.get("value"), f.get("unit"))
        lines.append(
            "| " + " | ".join(_cell(c) for c in (*cells, f.get("baseline"), f.get("ratio"))) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

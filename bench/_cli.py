"""What every bench's command line shares: the options ``run_all.py`` forwards to each bench, and
how a bench exits when it is interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable


def bench_parser(doc: str | None, *, default_seconds: float = 10.0) -> argparse.ArgumentParser:
    """The bench's parser (described by its docstring's first line), with the options every bench
    accepts so ``run_all.py`` can forward them to each one."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument(
        "--seconds",
        type=float,
        default=default_seconds,
        help="length of each timed load phase (benches without one ignore it) [%(default)s]",
    )
    return parser


def _handle_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so ``finally`` blocks stop the servers we started
    (run_all sends SIGTERM to a bench that times out)."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def run_main(bench: str, main: Callable[[], int]) -> None:
    """Run a bench's ``main``; Ctrl-C or SIGTERM (from run_all) stops its servers and exits 130."""
    _handle_sigterm()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{bench}: interrupted (servers stopped)", file=sys.stderr)
        sys.exit(130)

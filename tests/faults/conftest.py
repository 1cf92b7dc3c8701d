"""Crash trials: the figures of every kind at the end of the run (see ``tally``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.tally import REPORTS, trials
from tests.session_agents.conftest import llm, serve

__all__ = ["llm", "serve"]  # a served Iris on the fake model, shared with the session-agent suite


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORTS:
        return
    terminalreporter.section("crash trials")
    for report in REPORTS:
        terminalreporter.write_line(f"faults: {report.line()}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A time budget that grows with the trial count (setup.cfg's 120 s per test would cut a
    ``make faults TRIALS=100`` run short), for the trials here that set none of their own."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(300 + 30 * trials()))

"""Crash trials: the figures of every kind at the end of the run (see ``tally``)."""

from __future__ import annotations

from typing import Any

from tests.faults.tally import REPORTS
from tests.session_agents.conftest import llm, serve

__all__ = ["llm", "serve"]  # a served Iris on the fake model, shared with the session-agent suite


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORTS:
        return
    terminalreporter.section("crash trials")
    for report in REPORTS:
        terminalreporter.write_line(f"faults: {report.line()}")

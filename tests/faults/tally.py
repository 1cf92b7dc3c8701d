"""Counting what a crash trial lost or doubled, per kind, and printing it at the end of the run.

Every trial kind in this folder runs ``trials()`` times (20 in the suite; ``make faults
TRIALS=100`` for more), counts for each trial how many of the things it promised are missing
(``lost``) and how many arrived more than once (``duplicated``), and asserts both are zero only
after the last trial, so a failing run still reports the whole figure. The conftest prints one
line per kind in pytest's terminal summary: ``faults: <kind>: lost=0 duplicated=0 trials=20``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

TRIALS_VARIABLE = "IRIS_FAULT_TRIALS"
DEFAULT_TRIALS = 20


def trials() -> int:
    """How many trials of each kind this run makes."""
    value = os.environ.get(TRIALS_VARIABLE, "")
    count = int(value) if value.isdigit() else DEFAULT_TRIALS
    return max(count, 1)


@dataclass
class Tally:
    kind: str
    trials: int = 0
    lost: int = 0
    duplicated: int = 0
    notes: list[str] = field(default_factory=list)

    def record(self, *, expected: int, seen: int, what: str = "") -> None:
        """One trial: ``expected`` deliveries were promised and ``seen`` arrived."""
        self.trials += 1
        if seen < expected:
            self.lost += expected - seen
            self.notes.append(f"trial {self.trials}: {expected - seen} lost {what}".rstrip())
        elif seen > expected:
            self.duplicated += seen - expected
            self.notes.append(f"trial {self.trials}: {seen - expected} doubled {what}".rstrip())

    def line(self) -> str:
        return f"{self.kind}: lost={self.lost} duplicated={self.duplicated} trials={self.trials}"

    def assert_clean(self) -> None:
        assert self.lost == 0 and self.duplicated == 0, self.line() + "\n" + "\n".join(self.notes)


REPORTS: list[Tally] = []


def tally(kind: str) -> Tally:
    """A new tally, printed in the run's summary."""
    made = Tally(kind)
    REPORTS.append(made)
    return made

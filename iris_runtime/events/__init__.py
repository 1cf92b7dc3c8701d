"""Scheduled events: event files in events/ folders trigger immediate, one-shot or periodic
(cron + timezone) runs.

This package holds the pure scheduling core: cron parsing and next-time computation
(:mod:`.cron`) and a deterministic timetable driven by an injected clock (:mod:`.schedule`).
It does no I/O and starts no threads; the runtime wires it to event files and a runner loop.
"""

from iris_runtime.events.cron import CronSchedule
from iris_runtime.events.schedule import (
    Clock,
    Due,
    DueKind,
    ManualClock,
    SystemClock,
    Timetable,
)

__all__ = [
    "Clock",
    "CronSchedule",
    "Due",
    "DueKind",
    "ManualClock",
    "SystemClock",
    "Timetable",
]

"""Waiting in a test on a booted host or a started service: poll until it answers, and fail the
test naming what it waited for when it does not."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from iris_runtime.testing.polling import poll

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout: float = 90.0) -> T:
    """The first truthy ``check()`` (a wait, not a timing assertion): AssertionError naming
    ``what`` when ``timeout`` seconds pass first."""
    answer = poll(check, timeout, interval=0.25)
    if answer is None:
        raise AssertionError(f"timed out waiting for {what}")
    return answer

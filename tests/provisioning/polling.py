"""Waiting on a booted host or a started service: poll a check until it answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout: float = 90.0) -> T:
    """Poll ``check`` until it returns something truthy and return that (a wait, not a timing
    assertion): AssertionError naming ``what`` when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")

"""Registers the ``spawn-agent`` skill folder with Iris (entry point ``spawn_agent``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime import hookimpl

SKILL_DIR = Path(__file__).resolve().parent / "skill"


@hookimpl
def register_skills(register: Callable[[Any], None]) -> None:
    register(SKILL_DIR)

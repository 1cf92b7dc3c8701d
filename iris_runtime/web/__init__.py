"""The web layer: Flask apps per port, the API blueprints and the gunicorn app factory.

Only this package imports Flask, and only where a module needs it: ``capacity`` and ``worker``
are also used by ``iris serve``'s master, which never loads Flask (see
``tests/test_serving_imports.py``), so ``create_app`` is imported on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from iris_runtime.web.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

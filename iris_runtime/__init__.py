"""Iris: a self-hosted AI agent orchestrator.

Plugin authors need two names from here: ``hookimpl`` to mark hook implementations and
``__version__``. Everything else is reached through the hooks in :mod:`iris_runtime.hookspecs`.
"""

import pluggy

__version__ = "0.1.0"

PROJECT_NAME = "iris"

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["PROJECT_NAME", "__version__", "hookimpl"]

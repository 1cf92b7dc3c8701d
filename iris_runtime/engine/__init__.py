"""The engine: runs, channels, sessions, the agent loop and the transport contract.

It imports no Flask, no concrete transport and no plugin (an import-linter contract enforces it):
everything platform-shaped reaches it through :mod:`iris_runtime.engine.transport`.
"""

"""Sub-agents: the registry of other Iris instances this one can reach.

Each registered agent has a bridge URL, the names of the secrets it may be handed, and an optional
token it presents when it calls back. The registry lives in ``agents.json`` in the data dir; see
:mod:`iris_runtime.agents.registry`.
"""

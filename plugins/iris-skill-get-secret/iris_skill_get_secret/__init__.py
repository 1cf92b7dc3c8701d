"""The ``get-secret`` skill for Iris agents: a ``get-secret NAME`` command that fetches one
secret from the Iris secret broker with the agent's own token, and the SKILL.md that teaches an
agent to use it without ever showing the value.

Nothing is imported here: the command must start in environments that hold the standard library
and nothing else, while the plugin module (:mod:`iris_skill_get_secret.plugin`) needs Iris.
"""

__version__ = "0.1.0"

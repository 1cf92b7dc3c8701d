"""The ``spawn-agent`` skill for Iris: a SKILL.md that teaches the agent to grow its team with
``iris agents spawn`` (and to list and remove sub-agents), registered through ``register_skills``.
"""

__version__ = "0.1.0"

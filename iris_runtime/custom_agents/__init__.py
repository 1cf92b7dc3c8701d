"""Custom agents (spec 004): manifests in ``agents.d``, the relay contract v1, the reach socket,
notes and sign-in. See ``docs/custom_agents.md``."""

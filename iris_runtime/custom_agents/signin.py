"""Sign-in for relay agents that declare it (spec 004, "Sign-in from the app").

``auth`` says how to tell whether the agent is signed in (a file that exists and, if given,
contains a string); ``setup`` says how to sign it in (a login command per provider). An agent
that declares no ``auth`` is assumed to be set up, as the spec says of every custom agent.
"""

from __future__ import annotations

from iris_runtime.custom_agents.manifest import Manifest

MAX_PROBE_BYTES = 1024 * 1024
READY = "ready"
NEEDS_SIGN_IN = "needs_sign_in"


def signed_in(manifest: Manifest) -> bool:
    probe = manifest.auth
    if probe is None:
        return True
    try:
        with open(probe.file, "rb") as file:
            content = file.read(MAX_PROBE_BYTES)
    except OSError:
        return False
    return probe.contains is None or probe.contains.encode() in content


def status_of(manifest: Manifest) -> str:
    return READY if signed_in(manifest) else NEEDS_SIGN_IN


def login_argv(manifest: Manifest, provider: str) -> list[str]:
    """The login command for ``provider``; ValueError when the agent offers no such provider."""
    setup = manifest.setup
    if setup is None:
        raise ValueError(f"{manifest.kind} declares no setup: sign it in the way its docs say")
    ids = [p.id for p in setup.providers]
    if provider not in ids:
        raise ValueError(
            f"{manifest.kind} has no provider {provider!r} (it offers: {', '.join(ids)})"
        )
    return [part.replace("{provider}", provider) for part in setup.login]

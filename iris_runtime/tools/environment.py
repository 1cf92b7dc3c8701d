"""The environment commands run by tools see: Iris's own, minus the credentials of Iris itself.

The model can run ``env`` and repeat what it sees in a chat, so keys and tokens that only Iris's
process needs (LLM keys, chat-platform tokens, Vault credentials) never reach a tool's child
process. What a command legitimately needs goes through the secret broker instead:
``get-secret NAME`` with ``IRIS_API_TOKEN`` (kept: it is how the agent proves who it is to the
broker, which then limits it to its allow-list) and ``IRIS_SECRET_BROKER_URL``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Names that carry a credential by convention, whatever the service.
_CREDENTIAL = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# Kept although their names match: the agent's own broker identity, where to find it, and
# settings that merely name the secrets machinery.
_KEPT = frozenset(
    {
        "IRIS_API_TOKEN",
        "IRIS_API_TOKEN_FILE",
        "IRIS_SECRET_BROKER_URL",
        "IRIS_SECRETS_MODE",
        "IRIS_SECRET_BACKEND",
    }
)


def is_withheld(name: str) -> bool:
    return name not in _KEPT and bool(_CREDENTIAL.search(name))


def tool_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the credentials tools must not see."""
    return {name: value for name, value in environ.items() if not is_withheld(name)}

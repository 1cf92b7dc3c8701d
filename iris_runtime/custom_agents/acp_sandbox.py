"""Whether a custom ACP agent may start under the configured sandbox level.

ACP agents run on the host, in the data dir, and Iris approves every permission they ask for:
nothing of ``IRIS_SANDBOX`` applies to them. At any level but ``host`` starting one would undo
the boundary the operator chose, so it is refused unless ``IRIS_ACP_UNSANDBOXED=1`` says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OPT_OUT = "IRIS_ACP_UNSANDBOXED"


def unsandboxed_refusal(env: Mapping[str, str] | None = None) -> str | None:
    """The chat's message when an ACP agent must not start here, else None."""
    env = os.environ if env is None else env
    level = env.get("IRIS_SANDBOX", "").strip() or "host"
    if level == "host" or env.get(OPT_OUT) == "1":
        return None
    return (
        f"ACP agents are not started at sandbox level {level}: they would run on the host, in "
        f"Iris's data dir, outside the sandbox. Set {OPT_OUT}=1 to run them there anyway."
    )

"""What a spawn request may ask for, checked before anything is made: the agent's name, the
``--env`` settings it may carry, its skills, and the secrets its provider needs.

Shared by ``iris agents spawn``/``ensure`` and the root-owned agent-unit helper, which checks an
agent's record again with the same rules (a record is its caller's file)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from iris_runtime.agents.registry import NAME_RE
from iris_runtime.engine.skills import Skill, discover_skills
from iris_runtime.errors import InvalidInput
from iris_runtime.provision.launch import IDENTITY_VARS
from iris_runtime.tools.environment import is_withheld

MODES = ("service", "docker")
# Names no agent may take: they would shadow Iris itself or its own files in the data dir.
RESERVED_NAMES = frozenset({"iris", "main", "all", "agents", "secrets"})
# Non-secret provider settings a new agent inherits from Iris, so it talks to the same endpoint.
INHERITED_VARS = (
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "IRIS_OPENAI_BASE_URL",
    "IRIS_THINKING_BUDGET",
    "IRIS_REASONING_EFFORT",
    "IRIS_SCRIPT_FILE",
    "IRIS_LOG_LEVEL",
    # An agent host's bridge faces the network: its address, the trusted CAs (for the broker on
    # the Iris host), and the operator's explicit plain-HTTP switch. Never IRIS_TLS_CERT/KEY:
    # those are this Iris's own; an agent's bridge gets IRIS_AGENT_TLS_CERT/KEY (see launch_for).
    "IRIS_BRIDGE_HOST",
    "IRIS_TLS_CACERT",
    "IRIS_INSECURE_HTTP",
)
# What `--env` may not set: the agent's identity and wiring are spawn's to decide.
OWN_VARS = IDENTITY_VARS | {
    "IRIS_PROVIDER",
    "IRIS_MODEL",
    "IRIS_API_TOKEN_FILE",
    "PATH",
    "IRIS_SANDBOX",  # --sandbox
    # Paths the unit hands the agent as root-read credentials or trusts as its certificates:
    # spawn's (an agent host's IRIS_AGENT_TLS_*), never the caller's.
    "IRIS_TLS_CERT",
    "IRIS_TLS_KEY",
    "IRIS_TLS_CACERT",
    "CREDENTIALS_DIRECTORY",
}
# What loads code into the agent before Iris runs: never from --env.
LOADER_VAR_RE = re.compile(r"(LD_|PYTHON|GCONV_|MALLOC_|GLIBC_).*")
ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or ""):
        raise InvalidInput(
            f"invalid agent name {name!r}: use 1-63 of a-z, 0-9, '_' and '-', starting with a "
            "letter or digit",
            code="invalid_agent_name",
        )
    if name in RESERVED_NAMES:
        raise InvalidInput(f"{name!r} is reserved; choose another name", code="invalid_agent_name")
    return name


def check_extra_env(extra: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values: plain settings only. Credentials go through the broker, and the agent's
    identity is spawn's to set."""
    out: dict[str, str] = {}
    for name, value in extra.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise InvalidInput(f"--env {name!r}: not an environment variable name")
        if name in OWN_VARS:
            raise InvalidInput(f"--env {name}: set by spawn itself")
        if LOADER_VAR_RE.fullmatch(name):
            raise InvalidInput(f"--env {name}: changes what code the agent loads; refused")
        if is_withheld(name):
            raise InvalidInput(
                f"--env {name}: looks like a credential; store it as a secret and declare it in "
                "a skill's secrets: instead (units and state files are not secret)"
            )
        if "\n" in value or "\0" in value:
            raise InvalidInput(f"--env {name}: the value must be one line")
        out[name] = value
    return out


def resolve_skills(workspace: Path, plugin_skills: list[Path], names: Sequence[str]) -> list[Skill]:
    """The named skills (the workspace's own and the plugins'), or an error naming every
    unknown one and what is available."""
    if not names:
        return []
    available = {s.name: s for s in discover_skills(workspace, plugin_skills)}
    unknown = [n for n in names if n not in available]
    if unknown:
        known = ", ".join(sorted(available)) or "none"
        raise InvalidInput(
            f"unknown skill(s): {', '.join(unknown)} (available: {known})",
            code="unknown_skill",
        )
    return [available[n] for n in dict.fromkeys(names)]


def provider_key_vars(provider: str) -> list[str]:
    """The secret a provider needs, which the agent fetches from the broker under its variable
    name: it must be on the allow-list, nothing arrives implicitly."""
    if provider == "anthropic":
        from iris_runtime.providers.anthropic import KEY_VAR

        return [KEY_VAR]
    if provider == "openai":
        from iris_runtime.providers.openai_compat import KEY_VAR as OPENAI_KEY

        return [OPENAI_KEY]
    return []

"""What an agent id brings from its folder: its instructions and its provider keys.

A sub-agent's context is only its agent's ``AGENTS.md`` and ``TOOLS.md`` plus the task (spec 001:
no constitution, no memory, no other files). Its keys come from ``auth-profiles.json`` in its
folder, with main's file (in the workspace) merged in as a fallback and the agent's winning for
a provider both name, so a sub-agent can run on a key of its own::

    {"anthropic": {"apiKey": "sk-ant-…"},
     "openai": {"apiKey": "sk-…", "baseUrl": "https://…/v1"},
     "my-provider": {"env": {"MY_PROVIDER_KEY": "…"}}}

The file holds keys, so it must be private (no group or other access); one that is not is
refused, never read. Keys never reach logs or error messages.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.engine.prompt import workspace_text

# Where the two built-in providers read a profile's fields from.
_PROFILE_ENV = {
    "anthropic": {"apiKey": "ANTHROPIC_API_KEY", "baseUrl": "ANTHROPIC_BASE_URL"},
    "openai": {"apiKey": "OPENAI_API_KEY", "baseUrl": "IRIS_OPENAI_BASE_URL"},
}
_FIXED_LINE = (
    "You are a background sub-agent working on one task. Work on it with your tools; your "
    "final reply is reported back to the chat that spawned you."
)


class ProfileError(Exception):
    """An auth-profiles.json that cannot be used; the message never holds a key."""


def instructions(directory: Path) -> str:
    """A sub-agent's system prompt: a fixed line, then its AGENTS.md and TOOLS.md."""
    parts = [_FIXED_LINE]
    for name in (data_layout.AGENTS_MD, data_layout.TOOLS_MD):
        text = workspace_text(os.path.join(directory, name))
        if text:
            parts.append(f"## {name}\n{text}")
    return "\n\n".join(parts)


@dataclass(frozen=True)
class AuthProfiles:
    """Environment overrides per provider name (a profile's keys as its variables)."""

    by_provider: Mapping[str, Mapping[str, str]]

    def environment(self, provider: str, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, **self.by_provider.get(provider, {})}

    def over(self, fallback: AuthProfiles) -> AuthProfiles:
        """These profiles, with ``fallback``'s for providers these do not name."""
        return AuthProfiles({**fallback.by_provider, **self.by_provider})


NO_PROFILES = AuthProfiles({})


def load_profiles(directory: Path) -> AuthProfiles:
    """The folder's auth-profiles.json (none: no profiles). Raises ProfileError."""
    path = directory / data_layout.AUTH_PROFILES_JSON
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return NO_PROFILES
    except OSError as exc:
        raise ProfileError(f"{path} cannot be opened: {exc.strerror}") from None
    with os.fdopen(fd, encoding="utf-8") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode) or mode & 0o077:
            raise ProfileError(
                f"{path} holds keys, so it must be a private file (chmod 600); refused"
            )
        try:
            raw = json.load(handle)
        except (ValueError, UnicodeDecodeError):
            raise ProfileError(f"{path} is not valid JSON") from None
    return AuthProfiles(_parse(raw, path))


def _parse(raw: Any, path: Path) -> dict[str, dict[str, str]]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{path} must hold an object of provider names")
    parsed: dict[str, dict[str, str]] = {}
    for provider, profile in raw.items():
        parsed[provider] = _profile_env(provider, profile, path)
    return parsed


def _profile_env(provider: str, profile: Any, path: Path) -> dict[str, str]:
    fields = _PROFILE_ENV.get(provider, {})
    allowed = {*fields, "env"}
    if not isinstance(profile, dict) or set(profile) - allowed:
        raise ProfileError(
            f"{path}: the {provider!r} profile may only hold {', '.join(sorted(allowed))}"
        )
    env: dict[str, str] = {}
    extra = profile.get("env", {})
    if not isinstance(extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
    ):
        raise ProfileError(f"{path}: {provider}.env must map variable names to strings")
    env.update(extra)
    for key, variable in fields.items():
        value = profile.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ProfileError(f"{path}: {provider}.{key} must be a non-empty string")
        env[variable] = value.strip()
    return env

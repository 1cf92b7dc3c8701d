"""The plugin's settings, from the environment Iris read at start-up (``settings.env``).

Credentials may come from ``NAME`` or from a file named by ``NAME_FILE`` (preferred: a file keeps
the token out of the environment of every process Iris starts). Token values are never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from iris_runtime.env_values import credential
from iris_runtime.errors import ConfigError

APP_TOKEN = "IRIS_SLACK_APP_TOKEN"  # noqa: S105 (variable names, not values)
BOT_TOKEN = "IRIS_SLACK_BOT_TOKEN"  # noqa: S105
API_URL = "IRIS_SLACK_API_URL"
MAX_FILE_BYTES = "IRIS_SLACK_MAX_FILE_BYTES"

DEFAULT_API_URL = "https://slack.com/api/"
# Where Slack serves url_private: the only hosts (besides the API's own) given the bot token.
SLACK_FILE_HOSTS = frozenset({"files.slack.com"})
DEFAULT_MAX_FILE_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class SlackConfig:
    app_token: str = field(repr=False)
    bot_token: str = field(repr=False)
    api_url: str = DEFAULT_API_URL
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SlackConfig | None:
        """The configuration, or None when the credentials are absent (Slack stays off)."""
        app_token, bot_token = credential(env, APP_TOKEN), credential(env, BOT_TOKEN)
        if not app_token and not bot_token:
            return None
        if not app_token or not bot_token:
            missing = APP_TOKEN if not app_token else BOT_TOKEN
            raise ConfigError(
                f"Slack needs both {APP_TOKEN} and {BOT_TOKEN}; {missing} is not set "
                "(unset both to run without Slack)"
            )
        api_url = env.get(API_URL, "").strip() or DEFAULT_API_URL
        parts = urlsplit(api_url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ConfigError(f"{API_URL} must be an http(s) URL, got {api_url[:80]!r}")
        raw_max = env.get(MAX_FILE_BYTES, "").strip()
        try:
            max_file_bytes = int(raw_max) if raw_max else DEFAULT_MAX_FILE_BYTES
        except ValueError:
            raise ConfigError(f"{MAX_FILE_BYTES} must be a number of bytes") from None
        return cls(app_token, bot_token, api_url.rstrip("/") + "/", max(0, max_file_bytes))

    @property
    def file_hosts(self) -> frozenset[str]:
        """Hosts a file URL may point at for the bot token to be sent there."""
        host = urlsplit(self.api_url).netloc.lower()
        return SLACK_FILE_HOSTS | {host}

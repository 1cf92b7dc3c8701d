"""The transport's settings, read from the environment snapshot Iris passes to plugins.

``TELEGRAM_BOT_TOKEN`` (or ``TELEGRAM_BOT_TOKEN_FILE``, a file holding it) turns the transport
on; without it nothing here is used. The other variables tune it and have defaults that suit the
real Bot API.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from iris_runtime.env_values import credential, env_number
from iris_runtime.errors import ConfigError

TOKEN_VARIABLE = "TELEGRAM_BOT_TOKEN"  # noqa: S105 (a variable name)
DEFAULT_API_URL = "https://api.telegram.org"
_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]+")
_ID = re.compile(r"-?[0-9]{1,20}")
ANYONE = "*"
USERS_VARIABLE = "IRIS_TELEGRAM_ALLOWED_USERS"
CHATS_VARIABLE = "IRIS_TELEGRAM_ALLOWED_CHATS"


def _ids(env: Mapping[str, str], name: str) -> frozenset[str]:
    """A comma-separated list of numeric Telegram ids, or ``*`` (anyone)."""
    out: set[str] = set()
    for item in env.get(name, "").split(","):
        item = item.strip()
        if not item:
            continue
        if item != ANYONE and not _ID.fullmatch(item):
            raise ConfigError(f"{name}: {item[:40]!r} is neither a numeric Telegram id nor *")
        out.add(item)
    return frozenset(out)


def _number(
    env: Mapping[str, str],
    name: str,
    default: float,
    minimum: float,
    *,
    maximum: float | None = None,
) -> float:
    return env_number(env, name, default, minimum=minimum, maximum=maximum, kind=float)


@dataclass(frozen=True)
class TelegramConfig:
    token: str = field(repr=False)
    api_url: str = DEFAULT_API_URL
    poll_timeout: int = 25  # seconds a getUpdates long poll may wait
    edit_interval: float = 1.0  # seconds between edits in one chat
    retry_attempts: int = 8
    retry_base: float = 0.5  # first backoff, seconds; doubles up to retry_cap
    retry_cap: float = 30.0
    max_file_bytes: int = 20 * 1024 * 1024  # the Bot API's own download limit
    # Who may talk to the bot: user ids and chat ids ("*": anyone). Both empty: nobody.
    allowed_users: frozenset[str] = frozenset()
    allowed_chats: frozenset[str] = frozenset()

    @property
    def access_configured(self) -> bool:
        return bool(self.allowed_users or self.allowed_chats)

    def allows(self, user_id: str, chat_id: int) -> bool:
        """A message is accepted when its sender or its chat is allowed."""
        users, chats = self.allowed_users, self.allowed_chats
        return ANYONE in users or user_id in users or ANYONE in chats or str(chat_id) in chats

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TelegramConfig | None:
        """The configuration, or None when no token is set (the transport stays off)."""
        token = credential(env, TOKEN_VARIABLE)
        if not token:
            return None
        if not _TOKEN_SHAPE.fullmatch(token):
            # Never echo the value: it is a secret even when malformed.
            raise ConfigError(
                f"{TOKEN_VARIABLE} does not look like a bot token (<digits>:<letters, digits, "
                "_ and ->, as BotFather gives it)"
            )
        api_url = env.get("IRIS_TELEGRAM_API_URL", "").strip().rstrip("/") or DEFAULT_API_URL
        parts = urllib.parse.urlsplit(api_url)
        if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query:
            raise ConfigError(
                f"IRIS_TELEGRAM_API_URL must be an http(s) base URL, got {api_url[:80]!r}"
            )
        return cls(
            token=token,
            api_url=api_url,
            poll_timeout=int(_number(env, "IRIS_TELEGRAM_POLL_TIMEOUT_S", 25, 1, maximum=50)),
            edit_interval=_number(env, "IRIS_TELEGRAM_EDIT_INTERVAL_MS", 1000, 0) / 1000,
            retry_attempts=int(_number(env, "IRIS_TELEGRAM_RETRIES", 8, 1)),
            retry_base=_number(env, "IRIS_TELEGRAM_RETRY_BASE_MS", 500, 1) / 1000,
            retry_cap=_number(env, "IRIS_TELEGRAM_RETRY_MAX_MS", 30_000, 1) / 1000,
            allowed_users=_ids(env, USERS_VARIABLE),
            allowed_chats=_ids(env, CHATS_VARIABLE),
        )

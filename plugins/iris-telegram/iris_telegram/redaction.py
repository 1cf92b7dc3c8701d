"""Keep the bot token out of every log line.

The Bot API puts the token in the URL path (``/bot<token>/sendMessage``), and ``requests`` and
``urllib3`` put URLs in their exception messages and debug logs. Everything this plugin raises is
redacted at the source; this filter is the second line: installed on the HTTP libraries' loggers,
on this plugin's loggers and on the root logger's handlers, it rewrites any record that contains
a bot token (formatted message and traceback alike) before it is written.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback

# ``bot`` + the bot's numeric id + ``:`` + the secret: how a token appears in Bot API URLs.
_TOKEN_IN_TEXT = re.compile(r"\d{3,}:[A-Za-z0-9_-]{20,}")
REDACTED = "<redacted-token>"

_LOGGERS = (
    "urllib3",
    "urllib3.connectionpool",
    "urllib3.connection",
    "urllib3.poolmanager",
    "urllib3.response",
    "urllib3.util.retry",
    "requests",
    "iris_telegram",
    "iris_telegram.api",
    "iris_telegram.context",
    "iris_telegram.files",
    "iris_telegram.inbound",
    "iris_telegram.offsets",
    "iris_telegram.poller",
    "iris_telegram.sender",
    "iris_telegram.transport",
)


def redact(text: str, token: str | None = None) -> str:
    """``text`` without ``token`` or anything shaped like a bot token."""
    if token:
        text = text.replace(token, REDACTED)
    return _TOKEN_IN_TEXT.sub(REDACTED, text)


class RedactTokens(logging.Filter):
    """Rewrites a record's message and traceback with tokens redacted; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logging module's business
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            record.exc_text = redact(text)
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER = RedactTokens()
_installed_lock = threading.Lock()


def install() -> None:
    """Install the filter (idempotent; call again after logging is reconfigured)."""
    with _installed_lock:
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        for handler in logging.getLogger().handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def uninstall() -> None:
    with _installed_lock:
        for name in _LOGGERS:
            logging.getLogger(name).removeFilter(_FILTER)
        for handler in logging.getLogger().handlers:
            handler.removeFilter(_FILTER)

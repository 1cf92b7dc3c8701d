"""A wire-level fake of the Telegram Bot API, for the real client code to talk to.

:class:`FakeTelegram` is an HTTP server on a free 127.0.0.1 port that speaks the Bot API's URL
shapes, JSON envelope, HTML entity parsing (limits counted after parsing, in UTF-16 units), long
polling with offsets, 409 conflicts between pollers, files and flood control. Point a client's
base URL at :attr:`FakeTelegram.api_url` (Iris: ``IRIS_TELEGRAM_API_URL``) with
:attr:`FakeTelegram.token`, make users talk with :meth:`FakeTelegram.user_says`, and assert on
:attr:`FakeTelegram.calls` and :meth:`FakeTelegram.bot_messages`. Only the standard library is
used.
"""

from iris_runtime.testing.fake_telegram.bot_api import FakeTelegram
from iris_runtime.testing.fake_telegram.chats import BOT_USER, ApiCall, BotMessage, Edit, FakeChat
from iris_runtime.testing.fake_telegram.entities import (
    EntityParseError,
    Parsed,
    parse_html,
    utf16_len,
)
from iris_runtime.testing.fake_telegram.faults import (
    CONFLICT_OTHER_POLLER,
    CONFLICT_WEBHOOK,
    Fail,
    Fault,
    Reset,
    conflict,
    flood,
    server_error,
)
from iris_runtime.testing.fake_telegram.methods import CAPTION_LIMIT, MESSAGE_LIMIT
from iris_runtime.testing.fake_telegram.server import Upload

__all__ = [
    "BOT_USER",
    "CAPTION_LIMIT",
    "CONFLICT_OTHER_POLLER",
    "CONFLICT_WEBHOOK",
    "MESSAGE_LIMIT",
    "ApiCall",
    "BotMessage",
    "Edit",
    "EntityParseError",
    "Fail",
    "FakeChat",
    "FakeTelegram",
    "Fault",
    "Parsed",
    "Reset",
    "Upload",
    "conflict",
    "flood",
    "parse_html",
    "server_error",
    "utf16_len",
]

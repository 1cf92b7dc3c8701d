"""Registers the Telegram transport (entry point ``telegram`` in the ``iris`` group) when
``TELEGRAM_BOT_TOKEN`` is set. Without it this plugin registers no transport, connects nowhere
and logs nothing; it still declares that ``tg-`` channel ids are Telegram's, so they are refused
while Telegram is off instead of being taken by the bridge."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import ChannelShape
from iris_telegram.config import TelegramConfig
from iris_telegram.inbound import CHANNEL_PREFIX, CONVERSATION_ID
from iris_telegram.profile import TRANSPORT_ID


@hookimpl
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    config = TelegramConfig.from_env(settings.env)
    if config is None:
        return

    def build(engine: Engine) -> object:
        from iris_telegram.transport import TelegramTransport  # only paid for when configured

        return TelegramTransport(engine, config)

    register(build)


@hookimpl
def register_channel_shapes(register: Callable[[ChannelShape], None]) -> None:
    register(
        ChannelShape.prefixed(
            TRANSPORT_ID,
            CHANNEL_PREFIX,
            valid=CONVERSATION_ID,
            rule="tg-<chat id>[@<topic id>], and Telegram chat and topic ids are integers",
        )
    )

"""Registers the Telegram transport (entry point ``telegram`` in the ``iris`` group) when
``TELEGRAM_BOT_TOKEN`` is set. Without it this plugin registers nothing, connects nowhere and
logs nothing."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine
from iris_telegram.config import TelegramConfig


@hookimpl
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    config = TelegramConfig.from_env(settings.env)
    if config is None:
        return

    def build(engine: Engine) -> object:
        from iris_telegram.transport import TelegramTransport  # only paid for when configured

        return TelegramTransport(engine, config)

    register(build)

"""Iris in Telegram: a transport plugin over the Bot API (long polling with ``requests``).

Set ``TELEGRAM_BOT_TOKEN`` and Iris answers in Telegram chats (channels ``tg-<chat id>``); leave
it unset and the plugin costs nothing. ``IRIS_TELEGRAM_API_URL`` points the client at another
Bot API server (a self-hosted one, or the fake in ``iris_runtime.testing.fake_telegram``).
"""

__version__ = "0.1.0"

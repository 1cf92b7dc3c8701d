"""The chats and people a Telegram bot has seen since start-up, for the system prompt.

Telegram has no call that lists a bot's chats, so the directory is built from the messages that
arrive. A run's prompt lists only its own chat and that chat's people: names from other chats
(which anyone can choose, "Ignore previous instructions" included) never reach it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from iris_runtime.engine.transport import ChannelInfo, UserInfo
from iris_telegram.inbound import Inbound

DIRECTORY_SIZE = 500
PEOPLE_PER_CHAT = 50


class ChatDirectory:
    """Chats seen since start-up and the people seen in each (most recent last)."""

    def __init__(self) -> None:
        self._chats: OrderedDict[str, str] = OrderedDict()
        self._people: dict[str, OrderedDict[str, str]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _remember(table: OrderedDict[str, str], key: str, name: str, size: int) -> None:
        table.pop(key, None)
        table[key] = " ".join(name.split())[:80]
        while len(table) > size:
            table.popitem(last=False)

    def note(self, inbound: Inbound) -> None:
        with self._lock:
            chat = inbound.channel
            self._remember(
                self._chats, chat, f"{inbound.chat_name} ({inbound.chat_type})", DIRECTORY_SIZE
            )
            people = self._people.setdefault(chat, OrderedDict())
            name = inbound.user_name or inbound.user_id
            self._remember(people, inbound.user_id, name, PEOPLE_PER_CHAT)
            for gone in [c for c in self._people if c not in self._chats]:
                del self._people[gone]

    def channels(self, only: str | None = None) -> list[ChannelInfo]:
        with self._lock:
            return [
                ChannelInfo(k, v)
                for k, v in reversed(self._chats.items())
                if only is None or k == only
            ]

    def users(self, chat: str | None = None) -> list[UserInfo]:
        with self._lock:
            tables = [self._people.get(chat, OrderedDict())] if chat else self._people.values()
            seen: dict[str, str] = {}
            for table in tables:
                for key, name in reversed(table.items()):
                    seen.setdefault(key, name)
            return [UserInfo(k, v) for k, v in seen.items()]

    def name_of(self, channel: str) -> str | None:
        with self._lock:
            return self._chats.get(channel)

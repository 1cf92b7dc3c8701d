"""What the fake Bot API holds: the bot, its chats (forum topics, the bot's messages with every
edit, the ids of users' messages), the files users sent, and every call it received."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iris_runtime.testing.fake_telegram.server import Upload

BOT_USER = {"id": 777000111, "is_bot": True, "first_name": "Iris", "username": "iris_test_bot"}


@dataclass(frozen=True)
class Edit:
    at: float  # time.monotonic() when the fake received it
    text: str
    html: str | None


@dataclass
class BotMessage:
    """A message the bot sent (text or document), with every edit it received."""

    chat_id: int
    message_id: int
    sent_text: str  # visible text as first sent (after entity parsing and trimming)
    html: str | None  # the source the bot sent, when parse_mode was HTML (the latest edit's)
    entities: list[dict[str, Any]]
    thread_id: int | None
    reply_to: int | None
    sent_at: float
    edits: list[Edit] = field(default_factory=list)
    deleted: bool = False
    document: Upload | None = None

    @property
    def text(self) -> str:
        """The visible text now (after the latest edit)."""
        return self.edits[-1].text if self.edits else self.sent_text

    @property
    def history(self) -> list[str]:
        """The visible text it had: as sent, then after each edit."""
        return [self.sent_text, *(e.text for e in self.edits)]


@dataclass
class ApiCall:
    """One request the fake received."""

    method: str
    params: dict[str, Any]
    files: dict[str, Upload]
    at: float  # time.monotonic() on arrival
    status: int | None = None  # None: the connection was reset
    description: str | None = None


@dataclass
class FakeChat:
    id: int
    type: str
    title: str | None = None
    is_forum: bool = False
    topics: set[int] = field(default_factory=set)
    messages: dict[int, BotMessage] = field(default_factory=dict)
    user_messages: set[int] = field(default_factory=set)
    next_id: int = 1
    last_edit: float | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.title:
            out["title"] = self.title
        if self.is_forum:
            out["is_forum"] = True
        return out


@dataclass(frozen=True)
class StoredFile:
    file_id: str
    path: str
    content: bytes

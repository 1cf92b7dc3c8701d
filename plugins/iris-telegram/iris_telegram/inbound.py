"""Updates from ``getUpdates`` → what Iris acts on. Pure functions over untrusted JSON.

Only ``message`` updates become runs; every other update type (edits, channel posts, callback
queries, member changes, types Telegram adds later) is ignored. A message with neither text, a
caption, a photo nor a document (a sticker, a service message) is ignored too. Names of files
come from other people's clients: :func:`safe_file_name` makes them harmless before they reach
``resolve_channel_path``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

CHANNEL_PREFIX = "tg-"
# A Telegram channel: tg-<chat id>, where a chat id is a non-zero integer (negative for groups).
CHANNEL_ID = re.compile(r"tg-(-?[1-9][0-9]{0,19})")
# A conversation inside a chat is ``tg-<chat id>@<topic id>``: the part after ``@`` is always a
# forum topic (message_thread_id), never a message id (outside topics a chat is one conversation).
TOPIC_ID = re.compile(r"[1-9][0-9]{0,19}")
CONVERSATION_ID = re.compile(r"tg-(-?[1-9][0-9]{0,19})(?:@[1-9][0-9]{0,19})?")
_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]{3,64}))?(?=\s|$)")
MAX_NAME_BYTES = 120


def channel_for(chat_id: int) -> str:
    return f"{CHANNEL_PREFIX}{chat_id}"


def chat_id_of(channel: str) -> int | None:
    """The chat id of a ``tg-<chat id>`` channel; None for any other id."""
    match = CHANNEL_ID.fullmatch(channel)
    return int(match.group(1)) if match else None


def topic_of(thread: str | None) -> int | None:
    """The forum topic id a conversation key's thread part names (ASCII digits only)."""
    return int(thread) if thread is not None and TOPIC_ID.fullmatch(thread) else None


@dataclass(frozen=True)
class RemoteFile:
    file_id: str
    name: str  # already safe
    size: int | None


@dataclass(frozen=True)
class Inbound:
    """One user message worth acting on."""

    chat_id: int
    message_id: int
    text: str
    user_id: str
    user_name: str | None
    chat_name: str
    chat_type: str
    thread_id: int | None = None  # a forum topic
    command: str | None = None  # "stop" for /stop (addressed to us or to nobody in particular)
    files: tuple[RemoteFile, ...] = field(default_factory=tuple)
    raw_text: str = ""  # the text or caption exactly as sent
    mentioned: bool = False  # @bot in the text, a reply to the bot, or a command
    from_bot: bool = False
    # Set by a channel mode (iris_telegram.modes): the conversation the run belongs to (a
    # topic's or a message's own, else the chat) and the agent that answers instead of Iris.
    conversation: str | None = None
    agent: str | None = None

    @property
    def channel(self) -> str:
        return channel_for(self.chat_id)

    @property
    def run_key(self) -> str:
        """The channel id its run is kept under (its log, queue and stop)."""
        return self.conversation or self.channel


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def safe_file_name(name: str, fallback: str = "file") -> str:
    """A bare, printable file name of at most ``MAX_NAME_BYTES`` bytes, extension kept."""
    name = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(
        "_" if unicodedata.category(ch)[0] in {"C", "Z"} and ch != " " else ch for ch in name
    )
    cleaned = re.sub(r"\.{2,}", ".", cleaned).strip(" .")
    if not cleaned:
        cleaned = fallback
    stem, dot, extension = cleaned.rpartition(".")
    if not dot or not stem or len(extension) > 16:
        stem, extension = cleaned, ""
    suffix = f".{extension}" if extension else ""
    budget = MAX_NAME_BYTES - len(suffix.encode())
    while len(stem.encode()) > budget:
        stem = stem[:-1]
    return (stem.rstrip(" .") or fallback) + suffix


def _sender(message: dict[str, Any]) -> tuple[str, str | None]:
    sender = message.get("from")
    if isinstance(sender, dict) and _int(sender.get("id")) is not None:
        username = _str(sender.get("username"))
        full = " ".join(
            p for p in (_str(sender.get("first_name")), _str(sender.get("last_name"))) if p
        )
        name = f"@{username}" if username else (full or None)
        return str(sender["id"]), name
    chat = message.get("sender_chat")
    if isinstance(chat, dict) and _int(chat.get("id")) is not None:
        return f"chat{chat['id']}", _str(chat.get("title")) or None
    return "unknown", None


def _chat_name(chat: dict[str, Any]) -> str:
    title = _str(chat.get("title"))
    if title:
        return title
    username = _str(chat.get("username"))
    if username:
        return f"@{username}"
    first = " ".join(p for p in (_str(chat.get("first_name")), _str(chat.get("last_name"))) if p)
    return first or f"chat {chat.get('id')}"


def _files(message: dict[str, Any], message_id: int) -> tuple[RemoteFile, ...]:
    found: list[RemoteFile] = []
    photos = message.get("photo")
    if isinstance(photos, list):
        sizes = [p for p in photos if isinstance(p, dict) and _str(p.get("file_id"))]
        if sizes:
            best = max(
                sizes, key=lambda p: (_int(p.get("file_size")) or 0, _int(p.get("width")) or 0)
            )
            found.append(RemoteFile(best["file_id"], "photo.jpg", _int(best.get("file_size"))))
    document = message.get("document")
    if isinstance(document, dict) and _str(document.get("file_id")):
        name = safe_file_name(_str(document.get("file_name")), "document")
        found.append(RemoteFile(document["file_id"], name, _int(document.get("file_size"))))
    return tuple(found)


def parse_message(update: dict[str, Any], bot_username: str | None) -> Inbound | None:
    """The update as an :class:`Inbound`, or None when it is nothing to act on."""
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat = message.get("chat")
    message_id = _int(message.get("message_id"))
    if not isinstance(chat, dict) or message_id is None:
        return None
    chat_id = _int(chat.get("id"))
    if chat_id is None or chat_id == 0:
        return None
    raw = _str(message.get("text")) or _str(message.get("caption"))
    text = _without_own_mention(raw, bot_username)
    command = None
    match = _COMMAND.match(text)
    if match:
        addressee = match.group(2)
        if addressee and not (bot_username and addressee.lower() == bot_username.lower()):
            return None  # a command for another bot in the same group
        if match.group(1).lower() == "stop":
            command = "stop"
    files = _files(message, message_id)
    if not text.strip() and not files:
        return None
    user_id, user_name = _sender(message)
    thread = _int(message.get("message_thread_id")) if message.get("is_topic_message") else None
    sender = message.get("from")
    from_bot = isinstance(sender, dict) and sender.get("is_bot") is True
    return Inbound(
        chat_id=chat_id,
        message_id=message_id,
        text=text.strip(),
        user_id=user_id,
        user_name=user_name,
        chat_name=_chat_name(chat),
        chat_type=_str(chat.get("type")) or "unknown",
        thread_id=thread,
        command=command,
        files=files,
        raw_text=raw,
        mentioned=command is not None or match is not None or _addresses(message, bot_username),
        from_bot=from_bot,
    )


def _addresses(message: dict[str, Any], bot_username: str | None) -> bool:
    """``@bot`` anywhere in the text, or a reply to one of the bot's messages."""
    if not bot_username:
        return False
    raw = _str(message.get("text")) or _str(message.get("caption"))
    if re.search(rf"@{re.escape(bot_username)}\b", raw, re.IGNORECASE):
        return True
    replied = message.get("reply_to_message")
    sender = replied.get("from") if isinstance(replied, dict) else None
    return isinstance(sender, dict) and _str(sender.get("username")).lower() == bot_username.lower()


def _without_own_mention(text: str, bot_username: str | None) -> str:
    """``@iris_bot @helper do x`` → ``@helper do x``: in groups people address the bot first."""
    if not bot_username:
        return text
    stripped = text.lstrip()
    mention = f"@{bot_username}"
    if stripped.lower().startswith(mention.lower()):
        rest = stripped[len(mention) :]
        if not rest or rest[0].isspace() or rest[0] in ",:":
            return rest.lstrip(" \t\n,:")
    return text


def update_kind(update: dict[str, Any]) -> str:
    """The update's type (its one key besides ``update_id``), for log lines."""
    kinds = [k for k in update if k != "update_id"]
    return kinds[0] if len(kinds) == 1 and len(kinds[0]) <= 40 else "unknown"

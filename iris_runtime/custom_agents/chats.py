"""Chats as custom agents see them: a stable UUID for each Iris conversation (channel).

Spec 004 names a conversation by a ``chat_id`` UUID; Iris names it by its channel id
(``tg-42``, ``SESSION-x``, ``WEBUI-…``). The book maps one to the other, durably, and keeps the
relay session an agent asked to record with a chat. It is small and rewritten whole (temp file +
rename, mode 0600) on each change, which is rare: a chat's first turn or note, ``chat.new``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

from iris_runtime.private_files import private_dir, write_private_file

log = logging.getLogger(__name__)

CHATS_FILE = "chats.json"


class ChatBook:
    def __init__(self, directory: Path) -> None:
        self._path = directory / CHATS_FILE
        self._lock = threading.Lock()
        self._chats: dict[str, dict[str, Any]] = self._load()  # chat_id -> {"channel", ...}
        self._by_channel = {c["channel"]: chat_id for chat_id, c in self._chats.items()}

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            raw = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Never fatal: chat ids are re-made on demand; the bad file is left for a human.
            log.error("%s is unreadable, starting with no chats: %s", self._path, exc)
            return {}
        chats = raw.get("chats") if isinstance(raw, dict) else None
        if not isinstance(chats, dict):
            return {}
        return {
            k: v
            for k, v in chats.items()
            if isinstance(v, dict) and isinstance(v.get("channel"), str)
        }

    def _save(self) -> None:
        private_dir(self._path.parent)
        data = json.dumps({"chats": self._chats}, indent=1, sort_keys=True).encode()
        write_private_file(self._path, data)

    def id_for(self, channel: str) -> str:
        """The chat id of ``channel``, made (and kept) on first use."""
        with self._lock:
            chat_id = self._by_channel.get(channel)
            if chat_id is None:
                chat_id = self._add(channel)
            return chat_id

    def _add(self, channel: str) -> str:
        chat_id = str(uuid.uuid4())
        self._chats[chat_id] = {"channel": channel}
        self._by_channel[channel] = chat_id
        self._save()
        return chat_id

    def channel_of(self, chat_id: str) -> str | None:
        with self._lock:
            chat = self._chats.get(chat_id)
            return None if chat is None else str(chat["channel"])

    def record_session(self, chat_id: str, session: str) -> None:
        with self._lock:
            chat = self._chats.get(chat_id)
            if chat is not None and chat.get("session") != session:
                chat["session"] = session
                self._save()

    def session_of(self, chat_id: str) -> str | None:
        with self._lock:
            session = self._chats.get(chat_id, {}).get("session")
            return session if isinstance(session, str) else None

    def listing(self) -> list[dict[str, str]]:
        with self._lock:
            return [
                {"chat_id": chat_id, "channel": str(chat["channel"])}
                for chat_id, chat in sorted(self._chats.items(), key=lambda kv: kv[1]["channel"])
            ]

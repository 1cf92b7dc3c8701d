"""Chats as custom agents see them: a stable UUID for each Iris conversation (channel).

Spec 004 names a conversation by a ``chat_id`` UUID; Iris names it by its channel id
(``tg-42``, ``SESSION-x``, ``WEBUI-…``). The book maps one to the other, durably, and keeps the
relay session an agent asked to record with a chat. It is small and rewritten whole (temp file +
rename, mode 0600) on each change, which is rare: a chat's first turn or note, ``chat.new``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable
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
            # Never fatal: chat ids are re-made on demand. The bad file is moved aside for a
            # human first, so the next save cannot overwrite the ids it may still hold.
            self._keep_aside(str(exc))
            return {}
        chats = raw.get("chats") if isinstance(raw, dict) else None
        if not isinstance(chats, dict):
            self._keep_aside('it holds no "chats" object')
            return {}
        return {
            k: v
            for k, v in chats.items()
            if isinstance(v, dict) and isinstance(v.get("channel"), str)
        }

    def _keep_aside(self, why: str) -> None:
        aside = self._path.with_name(f"{CHATS_FILE}.bad-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(self._path, aside)
        except OSError as exc:
            log.error("%s is unreadable (%s) and cannot be moved aside: %s", self._path, why, exc)
            return
        log.error(
            "%s is unreadable (%s), starting with no chats; the file is kept aside as %s",
            self._path,
            why,
            aside,
        )

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

    def ensure(self, channels: Iterable[str]) -> None:
        """Give every one of ``channels`` a chat id (one save for all that were new)."""
        with self._lock:
            new = [c for c in dict.fromkeys(channels) if c not in self._by_channel]
            for channel in new:
                chat_id = str(uuid.uuid4())
                self._chats[chat_id] = {"channel": channel}
                self._by_channel[channel] = chat_id
            if new:
                self._save()

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

    def agent_state(self, chat_id: str, kind: str) -> dict[str, Any]:
        """What the chat keeps for one ACP agent: its ``session``, the chosen ``model``, and
        whether the owner was ``told_fresh`` (a copy; change it with :meth:`update_agent`)."""
        with self._lock:
            agents = self._chats.get(chat_id, {}).get("acp")
            state = agents.get(kind) if isinstance(agents, dict) else None
            return dict(state) if isinstance(state, dict) else {}

    def update_agent(self, chat_id: str, kind: str, **changes: Any) -> None:
        """Set (or, with None, remove) keys of the chat's state for ``kind``."""
        with self._lock:
            chat = self._chats.get(chat_id)
            if chat is None:
                return
            agents = chat.setdefault("acp", {})
            state = agents.setdefault(kind, {})
            before = dict(state)
            for key, value in changes.items():
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
            if state != before:
                self._save()

    def listing(self) -> list[dict[str, str]]:
        with self._lock:
            return [
                {"chat_id": chat_id, "channel": str(chat["channel"])}
                for chat_id, chat in sorted(self._chats.items(), key=lambda kv: kv[1]["channel"])
            ]

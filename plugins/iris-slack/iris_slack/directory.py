"""Who and where: the conversations and people the bot can see, cached for the prompt.

Filled from ``conversations.list`` and ``users.list`` when the transport connects, kept current
from events (the bot joining or leaving a channel, renames), and completed lazily: a message from
someone not in the cache triggers one ``users.info``, whose answer (even "no such user") is kept.
Names are user-controlled text, so they are folded to one short line before they reach a prompt.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from iris_runtime.engine.transport import ChannelInfo, UserInfo
from iris_slack.api import SlackApi, SlackError
from iris_slack.text import clip_line

log = logging.getLogger(__name__)

MAX_DISPLAY_NAME_CHARS = 80
MAX_LISTED_CHANNELS = 200
MAX_LISTED_USERS = 500


def user_name(user: dict[str, Any]) -> str:
    profile = user.get("profile") if isinstance(user.get("profile"), dict) else {}
    assert isinstance(profile, dict)
    for candidate in (profile.get("display_name"), user.get("name"), user.get("real_name")):
        if isinstance(candidate, str) and candidate.strip():
            return clip_line(candidate, MAX_DISPLAY_NAME_CHARS)
    return str(user.get("id", "unknown"))


class Directory:
    def __init__(self, api: SlackApi) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._channels: dict[str, dict[str, Any]] = {}
        self._users: dict[str, str | None] = {}  # None: looked up, no such user

    def load(self) -> None:
        """Fill the cache from the API (failures are logged; the cache fills in later)."""
        try:
            users = {
                u["id"]: user_name(u) for u in self._api.users() if isinstance(u.get("id"), str)
            }
            with self._lock:
                self._users.update(users)
        except SlackError as exc:
            log.warning("slack: could not list users: %s", exc.error)
        try:
            channels = {
                c["id"]: c for c in self._api.conversations() if isinstance(c.get("id"), str)
            }
            with self._lock:
                self._channels.update(channels)
        except SlackError as exc:
            log.warning("slack: could not list conversations: %s", exc.error)

    # -- channels ---------------------------------------------------------------------------

    def learn_channel(self, channel: dict[str, Any]) -> None:
        if isinstance(channel.get("id"), str):
            with self._lock:
                self._channels[channel["id"]] = channel

    def joined(self, channel_id: str) -> None:
        """The bot joined a channel: fetch what it is called."""
        try:
            info = self._api.conversation_info(channel_id)
        except SlackError as exc:
            log.warning("slack: could not look up a channel: %s", exc.error)
            info = None
        with self._lock:
            self._channels[channel_id] = {**(info or {"id": channel_id}), "is_member": True}

    def left(self, channel_id: str) -> None:
        with self._lock:
            entry = self._channels.get(channel_id)
            if entry is not None:
                entry["is_member"] = False

    def renamed(self, channel_id: str, name: str) -> None:
        with self._lock:
            entry = self._channels.setdefault(channel_id, {"id": channel_id})
            entry["name"] = name

    def is_member(self, channel_id: str) -> bool | None:
        """Whether the bot is in the channel (None: unknown to the cache)."""
        with self._lock:
            entry = self._channels.get(channel_id)
        if entry is None:
            return None
        return bool(entry.get("is_im") or entry.get("is_member"))

    def channel_name(self, channel_id: str) -> str | None:
        with self._lock:
            entry = self._channels.get(channel_id)
        if entry is None:
            return None
        if entry.get("is_im"):
            peer = entry.get("user")
            return f"@{self.user_name(peer)}" if isinstance(peer, str) else "direct message"
        name = entry.get("name")
        return (
            f"#{clip_line(name, MAX_DISPLAY_NAME_CHARS)}"
            if isinstance(name, str) and name
            else None
        )

    def channels(self) -> list[ChannelInfo]:
        with self._lock:
            entries = [e for e in self._channels.values() if e.get("is_im") or e.get("is_member")]
        out = []
        for entry in entries[:MAX_LISTED_CHANNELS]:
            name = self.channel_name(str(entry["id"]))
            out.append(ChannelInfo(str(entry["id"]), name or str(entry["id"])))
        return out

    # -- users ------------------------------------------------------------------------------

    def user_name(self, user_id: str) -> str:
        """A person's name; one ``users.info`` for someone not seen yet, the id if unknown."""
        with self._lock:
            known = user_id in self._users
            name = self._users.get(user_id)
        if not known:
            try:
                found = self._api.user_info(user_id)
            except SlackError as exc:
                log.warning("slack: could not look up a user: %s", exc.error)
                return user_id  # not cached: a later message tries again
            name = user_name(found) if found else None
            with self._lock:
                self._users[user_id] = name
        return name or user_id

    def learn_user(self, user: dict[str, Any]) -> None:
        if isinstance(user.get("id"), str):
            with self._lock:
                self._users[user["id"]] = user_name(user)

    def users(self) -> list[UserInfo]:
        with self._lock:
            named = [(uid, name) for uid, name in self._users.items() if name]
        return [UserInfo(uid, name) for uid, name in named[:MAX_LISTED_USERS]]

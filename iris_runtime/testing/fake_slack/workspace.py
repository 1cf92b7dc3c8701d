"""What the fake Slack workspace holds: users, conversations, messages, files, and every API call
it answered (for tests to assert on); :class:`Workspace` keeps them for the fake's parts to
share."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class User:
    id: str
    name: str
    real_name: str = ""
    is_bot: bool = False
    deleted: bool = False

    def as_json(self, team_id: str) -> dict[str, Any]:
        real = self.real_name or self.name
        return {
            "id": self.id,
            "team_id": team_id,
            "name": self.name,
            "real_name": real,
            "deleted": self.deleted,
            "is_bot": self.is_bot,
            "profile": {"real_name": real, "display_name": self.name},
        }


@dataclass
class Conversation:
    id: str
    name: str
    is_member: bool = True
    is_private: bool = False
    is_im: bool = False
    user: str | None = None  # the other party of a direct message
    is_archived: bool = False

    @property
    def channel_type(self) -> str:
        if self.is_im:
            return "im"
        return "group" if self.is_private else "channel"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "created": 1_700_000_000,
            "is_archived": self.is_archived,
            "is_im": self.is_im,
        }
        if self.is_im:
            out["user"] = self.user
            return out
        out.update(
            {
                "name": self.name,
                "is_channel": not self.is_private,
                "is_group": self.is_private,
                "is_private": self.is_private,
                "is_member": self.is_member,
            }
        )
        return out


@dataclass
class Edit:
    text: str
    at: float  # time.monotonic() when the fake received it


@dataclass
class Message:
    """One message in a conversation, by a person or by the bot (``bot=True``)."""

    channel: str
    ts: str
    text: str
    user: str
    bot: bool = False
    thread_ts: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    deleted: bool = False
    at: float = field(default_factory=time.monotonic)

    @property
    def current_text(self) -> str:
        """The text as it reads now (after the last edit)."""
        return self.edits[-1].text if self.edits else self.text


@dataclass
class StoredFile:
    id: str
    name: str
    content: bytes = b""
    mimetype: str = "application/octet-stream"
    title: str = ""
    uploaded: bool = False  # by the bot, through the upload URL

    def as_json(self, base: str) -> dict[str, Any]:
        from urllib.parse import quote

        url = f"{base}/files-pri/{self.id}/{quote(self.name, safe='')}"
        return {
            "id": self.id,
            "name": self.name,
            "title": self.title or self.name,
            "mimetype": self.mimetype,
            "filetype": self.name.rsplit(".", 1)[-1] if "." in self.name else "binary",
            "size": len(self.content),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url + "?download=1",
        }


@dataclass(frozen=True)
class ApiCall:
    """One Web API request as the fake saw it (``auth``: bot, app, none or invalid)."""

    method: str
    params: dict[str, Any]
    auth: str
    at: float
    status: int = 200
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


# --- faults a test can queue for the next calls of a method ------------------------------------


@dataclass(frozen=True)
class HttpFailure:
    """Answer with this HTTP status and a JSON error body (a 5xx from Slack's edge)."""

    status: int = 500
    error: str = "internal_error"


@dataclass(frozen=True)
class RateLimited:
    """HTTP 429 ``ratelimited`` with a ``Retry-After`` header (seconds)."""

    retry_after: int = 1


@dataclass(frozen=True)
class ApiError:
    """HTTP 200 ``{"ok": false, "error": ...}`` (e.g. ``not_in_channel``)."""

    error: str


@dataclass(frozen=True)
class DropConnection:
    """Close the connection without answering (a network error to the client)."""


@dataclass(frozen=True)
class ApplyThenDrop:
    """Apply the call, then close the connection without answering: the client cannot tell
    whether it worked (a reset or timeout after Slack did the work)."""


Fault = HttpFailure | RateLimited | ApiError | DropConnection | ApplyThenDrop


class Clock:
    """Slack-style message timestamps: unique and increasing ("1700000000.000001")."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def next_ts(self) -> str:
        with self._lock:
            return f"{int(time.time())}.{next(self._counter):06d}"


class Workspace:
    """The workspace's state, shared by the Web API, Socket Mode and the test's view of them.

    One condition guards all of it, and every change notifies it: that is what
    ``FakeSlack.wait_for`` waits on, so a test wakes on any change, whichever part made it.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.clock = Clock()
        self.users: dict[str, User] = {}
        self.conversations: dict[str, Conversation] = {}
        self.messages: list[Message] = []
        self.files: dict[str, StoredFile] = {}
        self.downloads: list[str] = []
        self._ids = iter(range(1, 1 << 62))

    def new_id(self, prefix: str) -> str:
        """A fresh Slack-style id: ``prefix`` and eight digits (``F00000001``)."""
        with self.cond:
            return f"{prefix}{next(self._ids):08d}"

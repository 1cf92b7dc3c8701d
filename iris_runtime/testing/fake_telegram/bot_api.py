"""A fake Telegram Bot API on loopback, for the real client code to talk to.

It keeps the state a bot can see (chats, forum topics, messages, pending updates, files) and
answers the Bot API's methods the way Telegram does: the same URL shapes
(``/bot<token>/<method>``, ``/file/bot<token>/<path>``), the same JSON envelope
(``{"ok": true, "result": …}`` or ``{"ok": false, "error_code": …, "description": …}``), HTML
parsing with Telegram's limits counted after entity parsing, long polling with ``offset``
confirmation, and a 409 when a second ``getUpdates`` starts while one is pending. Everything it
receives is recorded, so a test asserts on the actual API calls::

    with FakeTelegram() as fake:
        fake.user_says(42, "hello")
        ...  # point the client at fake.api_url with fake.token
        fake.wait_for(lambda f: f.bot_messages(42), "a reply")
        [reply] = fake.bot_messages(42)
        assert reply.text == "hi"

Faults are queued per method with :meth:`FakeTelegram.fail_next` (see
:mod:`iris_runtime.testing.fake_telegram.faults`).

:class:`FakeTelegram` is what a test holds: users' actions, faults, what the bot did, and the
routing of each request (token, fault, call log). Its parts: :mod:`.chats` (what it holds),
:mod:`.updates` (the update queue and long polling), :mod:`.methods` (the Bot API methods) and
:mod:`.server` (HTTP and the JSON envelope).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, Self

from iris_runtime.testing.fake_telegram.chats import (
    BOT_USER,
    ApiCall,
    BotMessage,
    Edit,
    FakeChat,
    StoredFile,
)
from iris_runtime.testing.fake_telegram.faults import Fail, Fault, Reset
from iris_runtime.testing.fake_telegram.methods import CAPTION_LIMIT, MESSAGE_LIMIT, BotMethods
from iris_runtime.testing.fake_telegram.server import (
    Answer,
    ApiError,
    LoopbackServer,
    Request,
    error,
    ok,
)
from iris_runtime.testing.fake_telegram.updates import UpdateQueue
from iris_runtime.testing.loopback_http import LoopbackFake, wait_until

__all__ = [
    "BOT_USER",
    "CAPTION_LIMIT",
    "MESSAGE_LIMIT",
    "ApiCall",
    "BotMessage",
    "Edit",
    "FakeChat",
    "FakeTelegram",
    "StoredFile",
]


class FakeTelegram(LoopbackFake):
    """See the module docstring. ``edit_min_interval`` (seconds) turns on flood control for
    ``editMessageText``: an edit in a chat sooner than that after the previous one gets a 429
    with ``retry_after``, as Telegram does to a bot that edits too fast."""

    def __init__(self, token: str | None = None, *, edit_min_interval: float | None = None) -> None:
        self.token = token or f"{BOT_USER['id']}:{secrets.token_urlsafe(26)}"
        self.errors: list[str] = []
        """Tracebacks of bugs in the fake itself (a test may assert it stays empty)."""
        self.calls: list[ApiCall] = []
        self.chats: dict[int, FakeChat] = {}
        self._files: dict[str, StoredFile] = {}
        self._faults: dict[str, deque[Fault]] = defaultdict(deque)
        self._lock = threading.Condition()
        self._updates = UpdateQueue(self._lock)
        self._methods = BotMethods(
            self._lock, self.chats, self._files, self._updates, edit_min_interval
        )
        self._service = LoopbackServer(self)

    @property
    def edit_min_interval(self) -> float | None:
        return self._methods.edit_min_interval

    @edit_min_interval.setter
    def edit_min_interval(self, seconds: float | None) -> None:
        self._methods.edit_min_interval = seconds

    @property
    def confirmed_offset(self) -> int:
        """The highest ``offset`` a ``getUpdates`` confirmed (updates below it are gone)."""
        return self._updates.confirmed_offset

    # -- lifecycle (the rest: LoopbackFake) -------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The Bot API base URL (what ``https://api.telegram.org`` is for the real one)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._updates.open()
        return super().start()

    def stop(self, timeout: float = 5.0) -> None:
        self._updates.close()  # first: a long poll waiting for updates must end
        super().stop(timeout)

    def __enter__(self) -> Self:
        return self.start()  # unlike the other fakes: entering a started one is an error

    def __repr__(self) -> str:
        return f"<FakeTelegram port={self.port if self._service.running else None}>"

    # -- what users do --------------------------------------------------------------------------

    def chat(self, chat_id: int, *, title: str | None = None, forum: bool = False) -> FakeChat:
        """The chat (created on first use: positive ids are private chats, negative ones
        supergroups)."""
        with self._lock:
            chat = self.chats.get(chat_id)
            if chat is None:
                private = chat_id > 0
                kind = "private" if private else "supergroup"
                chat = FakeChat(chat_id, kind, title or (None if private else f"group {chat_id}"))
                self.chats[chat_id] = chat
            if forum:
                chat.is_forum = True
            return chat

    def user_says(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        user_id: int | None = 1001,
        first_name: str = "Ana",
        username: str | None = "ana",
        thread_id: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A user sends a message to the bot; returns the update queued for ``getUpdates``.

        ``thread_id`` makes the chat a forum and the message a topic message. ``user_id=None``
        sends it without a ``from`` (as a channel or an anonymous admin would). ``extra`` is
        merged into the message object (photo, document, caption, …)."""
        chat = self.chat(chat_id, forum=thread_id is not None)
        with self._lock:
            message_id = chat.next_id
            chat.next_id += 1
            chat.user_messages.add(message_id)
            message: dict[str, Any] = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": chat.as_json(),
            }
            if user_id is not None:
                sender: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
                if username:
                    sender["username"] = username
                message["from"] = sender
            if thread_id is not None:
                chat.topics.add(thread_id)
                message["message_thread_id"] = thread_id
                message["is_topic_message"] = True
            if text is not None:
                message["text"] = text
            message.update(extra or {})
        return self.push_update({"message": message})

    def user_sends_document(
        self,
        chat_id: int,
        content: bytes,
        file_name: str | None,
        *,
        caption: str | None = None,
        mime_type: str = "application/octet-stream",
        **kwargs: Any,
    ) -> dict[str, Any]:
        stored = self.add_file(content, "documents")
        document: dict[str, Any] = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_id[-12:],
            "file_size": len(content),
            "mime_type": mime_type,
        }
        if file_name is not None:
            document["file_name"] = file_name
        extra: dict[str, Any] = {"document": document}
        if caption is not None:
            extra["caption"] = caption
        return self.user_says(chat_id, None, extra=extra, **kwargs)

    def user_sends_photo(
        self, chat_id: int, content: bytes, *, caption: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """A photo in two sizes (as Telegram sends them); the larger one has ``content``."""
        small = self.add_file(content[: max(1, len(content) // 4)], "photos")
        large = self.add_file(content, "photos")
        sizes = [
            {"file_id": small.file_id, "file_unique_id": "s", "width": 90, "height": 90,
             "file_size": len(small.content)},
            {"file_id": large.file_id, "file_unique_id": "l", "width": 800, "height": 800,
             "file_size": len(content)},
        ]  # fmt: skip
        extra: dict[str, Any] = {"photo": sizes}
        if caption is not None:
            extra["caption"] = caption
        return self.user_says(chat_id, None, extra=extra, **kwargs)

    def add_file(self, content: bytes, folder: str = "documents") -> StoredFile:
        file_id = "F" + secrets.token_urlsafe(18)
        stored = StoredFile(file_id, f"{folder}/file_{len(self._files)}.bin", content)
        with self._lock:
            self._files[file_id] = stored
        return stored

    def push_update(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update of any type (the fake assigns its ``update_id``)."""
        return self._updates.push(payload)

    # -- scripting faults -----------------------------------------------------------------------

    def fail_next(self, method: str, *faults: Fault) -> None:
        """Answer the next calls of ``method`` (``"*"``: any method) with these faults, in
        order, before answering normally again."""
        with self._lock:
            self._faults[method.lower()].extend(faults)

    # -- what tests read ------------------------------------------------------------------------

    def calls_of(self, method: str) -> list[ApiCall]:
        with self._lock:
            return [c for c in self.calls if c.method.lower() == method.lower()]

    def bot_messages(self, chat_id: int, *, include_deleted: bool = False) -> list[BotMessage]:
        """The bot's messages in a chat, oldest first."""
        with self._lock:
            chat = self.chats.get(chat_id)
            if chat is None:
                return []
            return [m for _, m in sorted(chat.messages.items()) if include_deleted or not m.deleted]

    @property
    def pending_updates(self) -> int:
        return len(self._updates)

    def wait_for(
        self, predicate: Callable[[FakeTelegram], Any], what: str, timeout: float = 30.0
    ) -> Any:
        """Wait until ``predicate(self)`` is truthy (re-checked on every change); return it."""
        value = wait_until(self._lock, lambda: predicate(self), timeout, poll=0.2)
        if not value:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        return value

    # -- answering ------------------------------------------------------------------------------

    def answer(self, request: Request) -> Answer:
        path = request.path
        if path.startswith("/file/bot"):
            return self._download(path[len("/file/bot") :])
        if not path.startswith("/bot") or "/" not in path[4:]:
            return error(404, "Not Found")
        token, _, method = path[4:].partition("/")
        call = ApiCall(method, dict(request.params), dict(request.files), time.monotonic())
        with self._lock:
            self.calls.append(call)
            self._lock.notify_all()
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return self._finish(call, error(401, "Unauthorized"))
        fault = self._next_fault(method)
        if isinstance(fault, Reset):
            return self._finish(call, None)
        if isinstance(fault, Fail):
            return self._finish(call, error(fault.status, fault.description, fault.retry_after))
        handler = self._methods.find(method)
        if handler is None:
            return self._finish(call, error(404, "Not Found"))
        try:
            result = handler(request.params, request.files)
        except ApiError as exc:
            return self._finish(call, error(exc.status, exc.description, exc.retry_after))
        return self._finish(call, ok(result))

    def _finish(self, call: ApiCall, answer: Answer) -> Answer:
        with self._lock:
            if answer is None:
                call.status = None
            else:
                call.status = answer[0]
                if answer[0] != 200:
                    call.description = json.loads(answer[2])["description"]
            self._lock.notify_all()
        return answer

    def _next_fault(self, method: str) -> Fault | None:
        with self._lock:
            for key in (method.lower(), "*"):
                if self._faults[key]:
                    return self._faults[key].popleft()
        return None

    def _download(self, rest: str) -> Answer:
        token, _, file_path = rest.partition("/")
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return error(401, "Unauthorized")
        with self._lock:
            found = next((f for f in self._files.values() if f.path == file_path), None)
        if found is None:
            return error(404, "Not Found")
        return 200, {"Content-Type": "application/octet-stream"}, found.content

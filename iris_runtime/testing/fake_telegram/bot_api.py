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
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from iris_runtime.testing.fake_telegram.entities import EntityParseError, Parsed, parse_html
from iris_runtime.testing.fake_telegram.faults import CONFLICT_OTHER_POLLER, Fail, Fault, Reset
from iris_runtime.testing.fake_telegram.server import LoopbackServer, Request, Upload

MESSAGE_LIMIT = 4096
CAPTION_LIMIT = 1024
MAX_UPDATES_PER_POLL = 100
BOT_USER = {"id": 777000111, "is_bot": True, "first_name": "Iris", "username": "iris_test_bot"}

Answer = tuple[int, dict[str, str], bytes] | None


class ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


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


class FakeTelegram:
    """See the module docstring. ``edit_min_interval`` (seconds) turns on flood control for
    ``editMessageText``: an edit in a chat sooner than that after the previous one gets a 429
    with ``retry_after``, as Telegram does to a bot that edits too fast."""

    def __init__(self, token: str | None = None, *, edit_min_interval: float | None = None) -> None:
        self.token = token or f"{BOT_USER['id']}:{secrets.token_urlsafe(26)}"
        self.edit_min_interval = edit_min_interval
        self.errors: list[str] = []
        """Tracebacks of bugs in the fake itself (a test may assert it stays empty)."""
        self.calls: list[ApiCall] = []
        self.chats: dict[int, FakeChat] = {}
        self.confirmed_offset = 0
        """The highest ``offset`` a ``getUpdates`` confirmed (updates below it are gone)."""
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1000)
        self._files: dict[str, StoredFile] = {}
        self._faults: dict[str, deque[Fault]] = defaultdict(deque)
        self._lock = threading.Condition()
        self._poll_generation = 0
        self._stopping = False
        self._server = LoopbackServer(self)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def api_url(self) -> str:
        """The Bot API base URL (what ``https://api.telegram.org`` is for the real one)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._stopping = False
        self._server.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._server.stop(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<FakeTelegram port={self._server.port if self._server._httpd else None}>"

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
        with self._lock:
            update = {**payload, "update_id": next(self._update_ids)}
            self._updates.append(update)
            self._lock.notify_all()
        return update

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
        with self._lock:
            return len(self._updates)

    def wait_for(
        self, predicate: Callable[[FakeTelegram], Any], what: str, timeout: float = 30.0
    ) -> Any:
        """Wait until ``predicate(self)`` is truthy (re-checked on every change); return it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = predicate(self)
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
                self._lock.wait(min(remaining, 0.2))

    # -- answering ------------------------------------------------------------------------------

    def answer(self, request: Request) -> Answer:
        path = request.path
        if path.startswith("/file/bot"):
            return self._download(path[len("/file/bot") :])
        if not path.startswith("/bot") or "/" not in path[4:]:
            return _error(404, "Not Found")
        token, _, method = path[4:].partition("/")
        call = ApiCall(method, dict(request.params), dict(request.files), time.monotonic())
        with self._lock:
            self.calls.append(call)
            self._lock.notify_all()
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return self._finish(call, _error(401, "Unauthorized"))
        fault = self._next_fault(method)
        if isinstance(fault, Reset):
            return self._finish(call, None)
        if isinstance(fault, Fail):
            return self._finish(call, _error(fault.status, fault.description, fault.retry_after))
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return self._finish(call, _error(404, "Not Found"))
        try:
            result = handler(request.params, request.files)
        except ApiError as exc:
            return self._finish(call, _error(exc.status, exc.description, exc.retry_after))
        return self._finish(call, _ok(result))

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
            return _error(401, "Unauthorized")
        with self._lock:
            found = next((f for f in self._files.values() if f.path == file_path), None)
        if found is None:
            return _error(404, "Not Found")
        return 200, {"Content-Type": "application/octet-stream"}, found.content

    # -- methods (named _m_<lowercased Bot API method>) ------------------------------------------

    def _m_getme(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return dict(BOT_USER)

    def _m_deletewebhook(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return True

    def _m_setmycommands(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return True

    def _m_getupdates(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        offset = _int(params.get("offset"), 0)
        limit = min(max(_int(params.get("limit"), MAX_UPDATES_PER_POLL), 1), MAX_UPDATES_PER_POLL)
        timeout = max(0, _int(params.get("timeout"), 0))
        deadline = time.monotonic() + timeout
        with self._lock:
            # A new poll ends any pending one with a conflict, as Telegram does.
            self._poll_generation += 1
            generation = self._poll_generation
            self._lock.notify_all()
            if offset > 0:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
                self.confirmed_offset = max(self.confirmed_offset, offset)
            while True:
                if self._stopping:
                    return []
                if generation != self._poll_generation:
                    raise ApiError(409, CONFLICT_OTHER_POLLER)
                ready = [u for u in self._updates if u["update_id"] >= offset][:limit]
                remaining = deadline - time.monotonic()
                if ready or remaining <= 0:
                    return ready
                self._lock.wait(remaining)

    def _m_sendchataction(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        self._chat(params)
        return True

    def _m_sendmessage(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        chat = self._chat(params)
        parsed = _parse_text(params, "text", MESSAGE_LIMIT)
        return self._store(chat, params, parsed)

    def _m_senddocument(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        chat = self._chat(params)
        upload = files.get("document")
        if upload is None:
            raise ApiError(400, "Bad Request: there is no document in the request")
        parsed = (
            _parse_text(params, "caption", CAPTION_LIMIT, empty_ok=True)
            if params.get("caption")
            else Parsed("")
        )
        return self._store(chat, params, parsed, document=upload)

    def _m_editmessagetext(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        chat = self._chat(params)
        message_id = _int(params.get("message_id"), 0)
        parsed = _parse_text(params, "text", MESSAGE_LIMIT)
        now = time.monotonic()
        with self._lock:
            message = chat.messages.get(message_id)
            if message is None or message.deleted:
                if message_id in chat.user_messages:
                    raise ApiError(400, "Bad Request: message can't be edited")
                raise ApiError(400, "Bad Request: message to edit not found")
            if parsed.text == message.text and parsed.entities == message.entities:
                raise ApiError(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup of "
                    "the message",
                )
            if (
                self.edit_min_interval is not None
                and chat.last_edit is not None
                and now - chat.last_edit < self.edit_min_interval
            ):
                wait = max(1, round(self.edit_min_interval - (now - chat.last_edit) + 0.499))
                raise ApiError(429, f"Too Many Requests: retry after {wait}", wait)
            chat.last_edit = now
            message.edits.append(Edit(now, parsed.text, _html_of(params)))
            message.html = _html_of(params)
            message.entities = parsed.entities
            self._lock.notify_all()
            return self._message_json(chat, message)

    def _m_deletemessage(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        chat = self._chat(params)
        message_id = _int(params.get("message_id"), 0)
        with self._lock:
            message = chat.messages.get(message_id)
            if message is None or message.deleted:
                raise ApiError(400, "Bad Request: message to delete not found")
            message.deleted = True
            self._lock.notify_all()
        return True

    def _m_getfile(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        with self._lock:
            stored = self._files.get(str(params.get("file_id", "")))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_id[-12:],
            "file_size": len(stored.content),
            "file_path": stored.path,
        }

    # -- helpers --------------------------------------------------------------------------------

    def _chat(self, params: dict[str, Any]) -> FakeChat:
        raw = params.get("chat_id")
        try:
            chat_id = int(str(raw))
        except ValueError:
            raise ApiError(400, "Bad Request: chat not found") from None
        with self._lock:
            chat = self.chats.get(chat_id)
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        return chat

    def _store(
        self,
        chat: FakeChat,
        params: dict[str, Any],
        parsed: Parsed,
        document: Upload | None = None,
    ) -> dict[str, Any]:
        thread_id = params.get("message_thread_id")
        thread = _int(thread_id, 0) if thread_id not in (None, "") else None
        reply = params.get("reply_parameters")
        reply_to = None
        if isinstance(reply, dict):
            reply_to = _int(reply.get("message_id"), 0)
        with self._lock:
            if thread is not None and (not chat.is_forum or thread not in chat.topics):
                raise ApiError(400, "Bad Request: message thread not found")
            if reply_to is not None:
                known = reply_to in chat.user_messages or reply_to in chat.messages
                if not known:
                    if not (isinstance(reply, dict) and reply.get("allow_sending_without_reply")):
                        raise ApiError(400, "Bad Request: message to be replied not found")
                    reply_to = None
            message = BotMessage(
                chat.id,
                chat.next_id,
                parsed.text,
                _html_of(params),
                parsed.entities,
                thread,
                reply_to,
                time.monotonic(),
                document=document,
            )
            chat.next_id += 1
            chat.messages[message.message_id] = message
            self._lock.notify_all()
            return self._message_json(chat, message)

    @staticmethod
    def _message_json(chat: FakeChat, message: BotMessage) -> dict[str, Any]:
        text = message.text
        out: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": chat.as_json(),
            "from": dict(BOT_USER),
        }
        if message.document is not None:
            out["document"] = {"file_name": message.document.filename}
            if text:
                out["caption"] = text
        else:
            out["text"] = text
        if message.entities:
            out["entities" if message.document is None else "caption_entities"] = message.entities
        if message.thread_id is not None:
            out["message_thread_id"] = message.thread_id
            out["is_topic_message"] = True
        return out


def _int(value: Any, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _html_of(params: dict[str, Any]) -> str | None:
    if str(params.get("parse_mode", "")).upper() == "HTML":
        return str(params.get("text", params.get("caption", "")))
    return None


def _parse_text(params: dict[str, Any], key: str, limit: int, *, empty_ok: bool = False) -> Parsed:
    raw = params.get(key)
    source = "" if raw is None else str(raw)
    mode = str(params.get("parse_mode", "") or "")
    if mode.upper() == "HTML":
        try:
            parsed = parse_html(source)
        except EntityParseError as exc:
            raise ApiError(400, str(exc)) from None
    elif mode:
        raise ApiError(400, f"Bad Request: unsupported parse_mode {mode!r} in this fake")
    else:
        parsed = Parsed(source.strip())
    if not parsed.text and not empty_ok:
        raise ApiError(400, f"Bad Request: message {key} is empty")
    if parsed.length > limit:
        what = "message is too long" if key == "text" else "message caption is too long"
        raise ApiError(400, f"Bad Request: {what}")
    return parsed


def _ok(result: Any) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"ok": True, "result": result}).encode()
    return 200, {"Content-Type": "application/json"}, body


def _error(
    status: int, description: str, retry_after: int | None = None
) -> tuple[int, dict[str, str], bytes]:
    payload: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        payload["parameters"] = {"retry_after": retry_after}
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode()

"""The Bot API methods the fake answers, as Telegram does: ``getMe``, ``deleteWebhook``,
``setMyCommands``, ``getUpdates``, ``sendChatAction``, ``sendMessage``, ``sendDocument``,
``editMessageText``, ``deleteMessage`` and ``getFile``.

Texts are parsed per ``parse_mode`` (HTML only, see :mod:`.entities`) and their limits counted
after parsing; a reply must name a message that exists (unless ``allow_sending_without_reply``),
a topic must exist in a forum; an edit that changes nothing, or of a message the bot did not
send, is refused with Telegram's own descriptions. With ``edit_min_interval`` set, an edit in a
chat sooner than that after the previous one gets a 429 with ``retry_after``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from iris_runtime.testing.fake_telegram.chats import (
    BOT_USER,
    BotMessage,
    Edit,
    FakeChat,
    StoredFile,
)
from iris_runtime.testing.fake_telegram.entities import EntityParseError, Parsed, parse_html
from iris_runtime.testing.fake_telegram.server import ApiError, Upload
from iris_runtime.testing.fake_telegram.updates import MAX_UPDATES_PER_POLL, UpdateQueue

MESSAGE_LIMIT = 4096
CAPTION_LIMIT = 1024


class BotMethods:
    """Answers the methods over the fake's chats, files and updates (shared with the fake, under
    its condition ``cond``). A method is ``_m_<its name in lower case>``; it returns the
    ``result`` or raises :class:`~.server.ApiError`."""

    def __init__(
        self,
        cond: threading.Condition,
        chats: dict[int, FakeChat],
        files: dict[str, StoredFile],
        updates: UpdateQueue,
        edit_min_interval: float | None,
    ) -> None:
        self.edit_min_interval = edit_min_interval
        self._cond = cond
        self._chats = chats
        self._files = files
        self._updates = updates

    def find(self, method: str) -> Callable[[dict[str, Any], dict[str, Upload]], Any] | None:
        """The implementation of ``method`` (any case), or None for one the fake does not know."""
        found: Callable[[dict[str, Any], dict[str, Upload]], Any] | None = getattr(
            self, f"_m_{method.lower()}", None
        )
        return found

    # -- methods (named _m_<lowercased Bot API method>) ------------------------------------------

    def _m_getme(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return dict(BOT_USER)

    def _m_deletewebhook(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return True

    def _m_setmycommands(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        return True

    def _m_getupdates(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        offset = _int(params.get("offset"), 0)
        limit = _int(params.get("limit"), MAX_UPDATES_PER_POLL)
        return self._updates.poll(offset, limit, _int(params.get("timeout"), 0))

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
        with self._cond:
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
            self._cond.notify_all()
            return self._message_json(chat, message)

    def _m_deletemessage(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        chat = self._chat(params)
        message_id = _int(params.get("message_id"), 0)
        with self._cond:
            message = chat.messages.get(message_id)
            if message is None or message.deleted:
                raise ApiError(400, "Bad Request: message to delete not found")
            message.deleted = True
            self._cond.notify_all()
        return True

    def _m_getfile(self, params: dict[str, Any], files: dict[str, Upload]) -> Any:
        with self._cond:
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
        with self._cond:
            chat = self._chats.get(chat_id)
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
        with self._cond:
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
            self._cond.notify_all()
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

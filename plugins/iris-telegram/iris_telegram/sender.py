"""Posting to a chat: chunked HTML messages, throttled edits, documents, and the fallbacks.

Every reply goes out as Telegram HTML chunks within the limit (see :mod:`iris_telegram.markup`).
Backstops for what should not happen: a chunk Telegram still finds too long is re-split at half
the size (down to a floor); a chunk it cannot parse is sent as plain text. An edit of a message
that is gone becomes a new message; an edit that changes nothing is a success.
"""

from __future__ import annotations

import logging
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris_runtime.errors import InvalidInput
from iris_runtime.transport_kit.edit_pacing import EditPacer
from iris_telegram.api import BotApi, TelegramError
from iris_telegram.markup import (
    MIN_CHUNK,
    TELEGRAM_LIMIT,
    Piece,
    escape,
    parse,
    render,
    split_pieces,
)

log = logging.getLogger(__name__)

CAPTION_LIMIT = 1024
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # the Bot API's limit for sendDocument


@dataclass(frozen=True)
class Target:
    """Where messages go: a chat, maybe a forum topic, maybe anchored to a user's message."""

    chat_id: int
    thread_id: int | None = None
    reply_to: int | None = None

    def params(self, *, reply: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"chat_id": self.chat_id}
        if self.thread_id is not None:
            out["message_thread_id"] = self.thread_id
        if reply and self.reply_to is not None:
            out["reply_parameters"] = {
                "message_id": self.reply_to,
                "allow_sending_without_reply": True,
            }
        return out


def _gone(exc: TelegramError) -> bool:
    text = exc.description.lower()
    return exc.error_code == 400 and (
        "message to edit not found" in text or "message can't be edited" in text
    )


def _unchanged(exc: TelegramError) -> bool:
    return exc.error_code == 400 and "message is not modified" in exc.description.lower()


def _too_long(exc: TelegramError) -> bool:
    return exc.error_code == 400 and "too long" in exc.description.lower()


def _unparsable(exc: TelegramError) -> bool:
    return exc.error_code == 400 and "can't parse entities" in exc.description.lower()


class ChatSender:
    def __init__(self, api: BotApi, pacer: EditPacer) -> None:
        self.api = api
        self.pacer = pacer

    # -- whole replies --------------------------------------------------------------------------

    def deliver(
        self,
        target: Target,
        markdown: str,
        *,
        placeholder: int | None = None,
        retry: bool = True,
    ) -> list[int]:
        """Post a reply: the first chunk replaces ``placeholder`` (when given), the rest follow
        as new messages in the same chat and topic. Returns the message ids used (none when the
        reply renders to nothing). ``retry=False``: one attempt per call (cosmetic messages)."""
        ids: list[int] = []
        for chunk in split_pieces(parse(markdown), TELEGRAM_LIMIT):
            edit = placeholder if not ids else None
            ids.extend(self._post_pieces(target, chunk, TELEGRAM_LIMIT, edit, not ids, retry))
        return ids

    def send_html(
        self, target: Target, html: str, *, reply: bool = True, retry: bool = True
    ) -> int:
        """One message whose HTML the caller built (a placeholder, a notice)."""
        params = {**target.params(reply=reply), "text": html, "parse_mode": "HTML"}
        return self._message_id("sendMessage", self.api.call("sendMessage", params, retry=retry))

    # -- edits ----------------------------------------------------------------------------------

    def try_edit(self, target: Target, message_id: int, html: str) -> float:
        """Edit now if the chat's edit slot is free (0.0), else return seconds until it is.
        One attempt only: progress is cosmetic and must not hold up the run."""
        wait = self.pacer.reserve(str(target.chat_id))
        if wait > 0:
            return wait
        self._edit(target, message_id, html, retry=False)
        return 0.0

    def edit(
        self, target: Target, message_id: int, text: str, *, html: bool = True, retry: bool = True
    ) -> None:
        """Edit a message, waiting for the chat's edit slot."""
        if not self.pacer.wait_and_reserve(str(target.chat_id)):
            raise TelegramError("editMessageText", "stopped while waiting for the edit slot")
        self._edit(target, message_id, text, html=html, retry=retry)

    def _edit(
        self,
        target: Target,
        message_id: int,
        text: str,
        *,
        retry: bool = True,
        html: bool = True,
    ) -> None:
        """The edit itself; the caller holds the chat's edit slot, released here."""
        params: dict[str, Any] = {"chat_id": target.chat_id, "message_id": message_id}
        params["text"] = text
        if html:
            params["parse_mode"] = "HTML"
        try:
            self.api.call("editMessageText", params, retry=retry)
        except TelegramError as exc:
            if not _unchanged(exc):
                raise
        finally:
            self.pacer.done(str(target.chat_id))

    # -- one chunk, with the backstops ------------------------------------------------------------

    def _post_pieces(
        self,
        target: Target,
        pieces: list[Piece],
        limit: int,
        edit: int | None,
        reply: bool,
        retry: bool,
    ) -> list[int]:
        """One chunk: an edit of ``edit`` (when given) or a new message. A message gone
        meanwhile is replaced by a new one; "too long" re-splits at half the size; "can't parse"
        sends the text without formatting."""
        try:
            if edit is not None:
                self.edit(target, edit, render(pieces), retry=retry)
                return [edit]
            return [self.send_html(target, render(pieces), reply=reply, retry=retry)]
        except TelegramError as exc:
            if edit is not None and _gone(exc):  # deleted meanwhile: post the reply instead
                return self._post_pieces(target, pieces, limit, None, True, retry)
            if _too_long(exc) and limit > MIN_CHUNK:
                smaller = max(MIN_CHUNK, limit // 2)
                ids: list[int] = []
                for part in split_pieces(pieces, smaller):
                    first = not ids
                    ids.extend(
                        self._post_pieces(
                            target, part, smaller, edit if first else None, reply and first, retry
                        )
                    )
                return ids
            if _unparsable(exc):
                log.error("Telegram could not parse a reply chunk (%s); sent as plain text", exc)
                plain = "".join(p[0] for p in pieces)
                if edit is not None:
                    self.edit(target, edit, plain, html=False, retry=retry)
                    return [edit]
                params = {**target.params(reply=reply), "text": plain}
                result = self.api.call("sendMessage", params, retry=retry)
                return [self._message_id("sendMessage", result)]
            raise

    # -- other calls ----------------------------------------------------------------------------

    def delete(self, target: Target, message_id: int) -> None:
        """Best effort: a placeholder that cannot be deleted is only cosmetic."""
        try:
            self.api.call("deleteMessage", {"chat_id": target.chat_id, "message_id": message_id})
        except TelegramError as exc:
            log.warning("could not delete a placeholder in chat %s: %s", target.chat_id, exc)

    def typing(self, target: Target) -> None:
        params: dict[str, Any] = {**target.params(reply=False), "action": "typing"}
        try:
            self.api.call("sendChatAction", params, retry=False)
        except TelegramError as exc:
            log.debug("typing indicator failed in chat %s: %s", target.chat_id, exc)

    def send_document(self, target: Target, path: Path, title: str | None) -> int:
        """Upload a file, streamed from disk (never read into memory whole)."""
        size = path.stat().st_size
        if size > MAX_UPLOAD_BYTES:
            raise InvalidInput(f"{path.name} is larger than Telegram's 50 MB upload limit")
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        params: dict[str, Any] = target.params(reply=False)
        if title:
            chunks = list(split_pieces([(title, ())], CAPTION_LIMIT))
            if chunks:
                params["caption"] = escape("".join(p[0] for p in chunks[0]))
                params["parse_mode"] = "HTML"
        files = {"document": (path.name, path, mime)}
        result = self.api.call("sendDocument", params, files=files)
        return self._message_id("sendDocument", result)

    @staticmethod
    def _message_id(method: str, result: Any) -> int:
        if isinstance(result, dict) and isinstance(result.get("message_id"), int):
            return int(result["message_id"])
        raise TelegramError(method, "the answer carried no message_id")

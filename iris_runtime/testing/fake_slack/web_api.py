"""The Web API: the ``/api/<method>`` calls a bot makes, and the file upload and download URLs.

Every call is recorded as an :class:`~.workspace.ApiCall`. The token comes from the
``Authorization`` header or a ``token`` parameter: ``apps.connections.open`` takes the app-level
token, every other method the bot token. A fault queued for the method (:meth:`WebApi.inject`)
answers instead of the method: an HTTP error, ``ratelimited`` (429 with ``Retry-After``), an
``{"ok": false}`` error, a dropped connection, or the call applied and then the connection
dropped. Otherwise the method ``chat.postMessage`` is answered by ``_m_chat_postMessage``, and so
on; a method the fake does not know answers ``unknown_method``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from typing import Any, Protocol

from iris_runtime.testing.fake_slack.http_handler import Abort, SlackHandler
from iris_runtime.testing.fake_slack.socket_mode import SocketMode
from iris_runtime.testing.fake_slack.workspace import (
    ApiCall,
    ApiError,
    ApplyThenDrop,
    DropConnection,
    Edit,
    Fault,
    HttpFailure,
    Message,
    RateLimited,
    StoredFile,
    Workspace,
)

# Methods that need the app-level token; every other method needs the bot token.
_APP_METHODS = {"apps.connections.open"}


class SlackApp(Protocol):
    """What the Web API reads from the fake it serves (``FakeSlack``): the app's tokens and the
    bot's identity, limits a test may change at any time, the server's address, and events (a
    bot message is echoed back as an event, as Slack does)."""

    bot_token: str
    app_token: str
    team_id: str
    bot_user_id: str
    bot_id: str
    max_text_length: int
    page_size: int
    echo_bot_messages: bool

    @property
    def base_url(self) -> str: ...

    @property
    def port(self) -> int: ...

    def send_event(self, event: dict[str, Any], *, event_id: str | None = None) -> str: ...


class WebApi:
    """Answers the Web API for ``app`` over ``workspace``; ``sockets`` hands out the Socket Mode
    tickets of ``apps.connections.open``."""

    def __init__(self, app: SlackApp, workspace: Workspace, sockets: SocketMode) -> None:
        self._app = app
        self._workspace = workspace
        self._sockets = sockets
        self._calls: list[ApiCall] = []
        self._faults: dict[str, deque[Fault]] = {}

    def inject(self, method: str, *faults: Fault) -> None:
        with self._workspace.cond:
            self._faults.setdefault(method, deque()).extend(faults)

    def pending_faults(self, method: str) -> int:
        with self._workspace.cond:
            return len(self._faults.get(method, ()))

    def calls(self, method: str | None = None) -> list[ApiCall]:
        with self._workspace.cond:
            return [c for c in self._calls if method is None or c.method == method]

    def _take_fault(self, method: str) -> Fault | None:
        with self._workspace.cond:
            queue = self._faults.get(method)
            return queue.popleft() if queue else None

    def _record(self, call: ApiCall) -> None:
        with self._workspace.cond:
            self._calls.append(call)
            self._workspace.cond.notify_all()

    # --- the envelope of every call ------------------------------------------------------------

    def answer(self, handler: SlackHandler, method: str, params: dict[str, Any]) -> None:
        """Answer one ``/api/<method>`` request: check the token, apply a queued fault, record the
        call, run the method."""
        token = params.pop("token", None)
        header = handler.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header[len("Bearer ") :]
        expected = self._app.app_token if method in _APP_METHODS else self._app.bot_token
        if token is None:
            auth = "none"
        elif token == expected:
            auth = "app" if method in _APP_METHODS else "bot"
        else:
            auth = "invalid"
        now = time.monotonic()
        fault = self._take_fault(method)
        if isinstance(fault, DropConnection):
            self._record(ApiCall(method, params, auth, now, 0, "dropped"))
            raise Abort
        if isinstance(fault, HttpFailure):
            self._record(ApiCall(method, params, auth, now, fault.status, fault.error))
            handler.send_json(fault.status, {"ok": False, "error": fault.error})
            return
        if isinstance(fault, RateLimited):
            self._record(ApiCall(method, params, auth, now, 429, "ratelimited"))
            handler.send_json(
                429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(fault.retry_after)}
            )
            return
        if auth != "app" and auth != "bot":
            error = "not_authed" if auth == "none" else "invalid_auth"
            if token == self._app.bot_token and method in _APP_METHODS:
                error = "not_allowed_token_type"
            self._record(ApiCall(method, params, auth, now, 200, error))
            handler.send_json(200, {"ok": False, "error": error})
            return
        # The effect and its record appear together to a test waiting on either.
        with self._workspace.cond:
            if isinstance(fault, ApiError):
                result: dict[str, Any] = {"ok": False, "error": fault.error}
            else:
                answer = getattr(self, "_m_" + method.replace(".", "_"), None)
                result = answer(params) if answer else {"ok": False, "error": "unknown_method"}
            failure = None if result.get("ok") else str(result.get("error"))
            if isinstance(fault, ApplyThenDrop):
                failure = "applied_then_dropped"
            self._record(ApiCall(method, params, auth, now, 200, failure))
        if isinstance(fault, ApplyThenDrop):
            raise Abort
        handler.send_json(200, result)

    # --- the methods: ``chat.postMessage`` is ``_m_chat_postMessage`` ---------------------------

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": self._workspace.users[self._app.bot_user_id].name,
            "team_id": self._app.team_id,
            "user_id": self._app.bot_user_id,
            "bot_id": self._app.bot_id,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = self._sockets.new_ticket()
        return {"ok": True, "url": f"ws://127.0.0.1:{self._app.port}/link/?ticket={ticket}"}

    def _postable(self, channel: str) -> str | None:
        conv = self._workspace.conversations.get(channel)
        if conv is None:
            return "channel_not_found"
        if conv.is_archived:
            return "is_archived"
        if not conv.is_member:
            return "not_in_channel"
        return None

    def _text_problem(self, text: Any) -> str | None:
        if not isinstance(text, str) or not text.strip():
            return "no_text"
        if len(text) > self._app.max_text_length:
            return "msg_too_long"
        return None

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        text = params.get("text")
        problem = self._postable(channel) or self._text_problem(text)
        if problem:
            return {"ok": False, "error": problem}
        thread_ts = params.get("thread_ts") or None
        with self._workspace.cond:
            ts = self._workspace.clock.next_ts()
            message = Message(channel, ts, str(text), self._app.bot_user_id, True, thread_ts)
            self._workspace.messages.append(message)
            self._workspace.cond.notify_all()
        body = self._bot_message_json(message)
        if self._app.echo_bot_messages:
            self._echo({"type": "message", "channel": channel, **body})
        return {"ok": True, "channel": channel, "ts": ts, "message": body}

    def _m_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._read_back(params, None)

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._read_back(params, str(params.get("ts") or ""))

    def _read_back(self, params: dict[str, Any], thread: str | None) -> dict[str, Any]:
        """Messages of a channel (``thread`` None: top level) or of a thread, newer than
        ``oldest``; bot messages as Slack shows them."""
        channel = str(params.get("channel", ""))
        if channel not in self._workspace.conversations:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(params.get("oldest") or 0)
        found = []
        with self._workspace.cond:
            for m in self._workspace.messages:
                if m.channel != channel or m.deleted or float(m.ts) <= oldest:
                    continue
                if (thread is None and m.thread_ts is None) or (
                    thread is not None and (m.ts == thread or m.thread_ts == thread)
                ):
                    found.append(m)
        out = [
            self._bot_message_json(m)
            if m.bot
            else {"type": "message", "user": m.user, "text": m.current_text, "ts": m.ts}
            for m in found
        ]
        return {"ok": True, "messages": out if thread is not None else out[::-1]}

    def _bot_message_json(self, message: Message) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "message",
            "text": message.current_text,
            "user": self._app.bot_user_id,
            "bot_id": self._app.bot_id,
            "ts": message.ts,
        }
        if message.thread_ts:
            body["thread_ts"] = message.thread_ts
        return body

    def _echo(self, event: dict[str, Any]) -> None:
        # Delivered from another thread: the answer to the API call comes first, as on Slack.
        threading.Thread(target=self._app.send_event, args=(event,), daemon=True).start()

    def _own_message(self, channel: str, ts: str) -> Message | str:
        with self._workspace.cond:
            for message in self._workspace.messages:
                if message.channel == channel and message.ts == ts and not message.deleted:
                    return message if message.bot else "cant_update_message"
        return "message_not_found"

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if channel not in self._workspace.conversations:
            return {"ok": False, "error": "channel_not_found"}
        found = self._own_message(channel, str(params.get("ts", "")))
        if isinstance(found, str):
            return {"ok": False, "error": found}
        text = params.get("text")
        problem = self._text_problem(text)
        if problem:
            return {"ok": False, "error": problem}
        with self._workspace.cond:
            found.edits.append(Edit(str(text), time.monotonic()))
            self._workspace.cond.notify_all()
        if self._app.echo_bot_messages:
            self._echo(
                {
                    "type": "message",
                    "subtype": "message_changed",
                    "channel": channel,
                    "message": self._bot_message_json(found),
                    "ts": self._workspace.clock.next_ts(),
                }
            )
        return {"ok": True, "channel": channel, "ts": found.ts, "text": text}

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        found = self._own_message(channel, str(params.get("ts", "")))
        if isinstance(found, str):
            return {"ok": False, "error": found}
        with self._workspace.cond:
            found.deleted = True
            self._workspace.cond.notify_all()
        return {"ok": True, "channel": channel, "ts": found.ts}

    def _paged(self, key: str, items: list[Any], params: dict[str, Any]) -> dict[str, Any]:
        """The page of ``items`` that ``cursor`` and ``limit`` ask for, under ``key``, with the
        cursor of the next page ("" after the last)."""
        page_size = self._app.page_size
        try:
            limit = max(1, min(int(params.get("limit") or page_size), page_size))
            start = int(base64.b64decode(str(params.get("cursor") or "MA==")).decode())
        except ValueError:
            return {"ok": False, "error": "invalid_cursor"}
        end = start + limit
        cursor = base64.b64encode(str(end).encode()).decode() if end < len(items) else ""
        return {"ok": True, key: items[start:end], "response_metadata": {"next_cursor": cursor}}

    def _m_conversations_list(self, params: dict[str, Any]) -> dict[str, Any]:
        wanted = set(str(params.get("types") or "public_channel").split(","))
        exclude_archived = str(params.get("exclude_archived", "")).lower() in {"1", "true"}
        with self._workspace.cond:
            convs = list(self._workspace.conversations.values())
        visible = []
        for conv in convs:
            kind = (
                "im" if conv.is_im else "private_channel" if conv.is_private else "public_channel"
            )
            if kind not in wanted or (exclude_archived and conv.is_archived):
                continue
            if kind == "private_channel" and not conv.is_member:
                continue
            visible.append(conv.as_json())
        return self._paged("channels", visible, params)

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._workspace.cond:
            conv = self._workspace.conversations.get(str(params.get("channel", "")))
        if conv is None or (conv.is_private and not conv.is_member):
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": conv.as_json()}

    def _m_users_list(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._workspace.cond:
            members = [u.as_json(self._app.team_id) for u in self._workspace.users.values()]
        return self._paged("members", members, params)

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._workspace.cond:
            user = self._workspace.users.get(str(params.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user.as_json(self._app.team_id)}

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = params.get("filename")
        try:
            length = int(params.get("length", ""))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        if not filename or length < 0:
            return {"ok": False, "error": "invalid_arguments"}
        stored = StoredFile(self._workspace.new_id("F"), str(filename))
        with self._workspace.cond:
            self._workspace.files[stored.id] = stored
        return {
            "ok": True,
            "upload_url": f"{self._app.base_url}/upload/v1/{stored.id}",
            "file_id": stored.id,
        }

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            entries = json.loads(str(params.get("files", "")))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        channel = params.get("channel_id") or None
        if channel is not None:
            problem = self._postable(str(channel))
            if problem:
                return {"ok": False, "error": problem}
        shared = []
        with self._workspace.cond:
            for entry in entries if isinstance(entries, list) else []:
                stored = self._workspace.files.get(str(entry.get("id")))
                if stored is None or not stored.uploaded:
                    return {"ok": False, "error": "file_not_found"}
                stored.title = str(entry.get("title") or stored.name)
                shared.append(stored)
            if channel is not None:
                ts = self._workspace.clock.next_ts()
                message = Message(
                    str(channel),
                    ts,
                    str(params.get("initial_comment") or ""),
                    self._app.bot_user_id,
                    True,
                    params.get("thread_ts") or None,
                    [f.as_json(self._app.base_url) for f in shared],
                )
                self._workspace.messages.append(message)
            self._workspace.cond.notify_all()
        return {
            "ok": True,
            "files": [{"id": f.id, "name": f.name, "title": f.title} for f in shared],
        }

    # --- files: the upload URLs and the downloads -----------------------------------------------

    def upload(self, handler: SlackHandler, file_id: str, body: bytes) -> None:
        with self._workspace.cond:
            stored = self._workspace.files.get(file_id)
            if stored is not None:
                stored.content = body
                stored.uploaded = True
                self._workspace.cond.notify_all()
        if stored is None:
            handler.send_plain(404, b"not found")
        else:
            handler.send_plain(200, f"OK - {len(body)}".encode())

    def download(self, handler: SlackHandler, file_id: str) -> None:
        if handler.headers.get("Authorization", "") != f"Bearer {self._app.bot_token}":
            # Slack answers an unauthenticated file URL with its login page.
            handler.send_plain(302, b"", {"Location": "https://fake.slack.test/login"})
            return
        with self._workspace.cond:
            stored = self._workspace.files.get(file_id)
            if stored is not None:
                self._workspace.downloads.append(file_id)
                self._workspace.cond.notify_all()
        if stored is None:
            handler.send_plain(404, b"not found")
        else:
            handler.send_plain(200, stored.content, {"Content-Type": stored.mimetype})

"""Iris's side of an ACP connection with an editor: the SDK's ``Agent``.

Each editor session is an Iris conversation (channel ``ACP-<session id>`` in the data folder),
so it has Iris's whole turn: the same tools, ``@agent`` routing, sub-agents and secrets. The
engine is threaded; this runs on the SDK's event loop and waits for runs in the default executor.
Everything the editor sees during a prompt goes through one queue, so updates keep their order
and all of them are sent before the prompt's answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
)

from iris_runtime import __version__
from iris_runtime.acp.models import ModelOption
from iris_runtime.acp.permissions import Asker
from iris_runtime.acp.transport import CHANNEL_PREFIX, AcpTransport, channel_of
from iris_runtime.engine.channels import resolve_channel_dir, resolve_channel_path
from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import Attachment, ToolEvent, TransportEvent
from iris_runtime.errors import IrisError
from iris_runtime.private_files import write_private_file

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"[0-9a-f]{32}")
META_FILE = "acp-session.json"
TITLE_CHARS = 80
IMAGE_SUFFIX = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
}
FAILED = {"failed", "max_turns", "cancelled"}


class IrisAgent:
    def __init__(
        self, engine: Engine, transport: AcpTransport, models: ModelOption, asker: Asker
    ) -> None:
        self.engine = engine
        self.transport = transport
        self.models = models
        self.asker = asker
        self.conn: Client | None = None
        self.data_dir = engine.settings.data_dir
        self._prompting: set[str] = set()  # channels with a prompt in progress

    def on_connect(self, conn: Client) -> None:
        self.conn = conn
        self.asker.conn = conn

    # -- set-up -------------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            agent_info=Implementation(name="iris", title="Iris", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None  # Iris's keys are its own configuration; nothing to sign in to

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        directory = resolve_channel_dir(self.data_dir, channel_of(session_id), create=True)
        meta = {"cwd": cwd, "title": ""}
        write_private_file(directory / META_FILE, json.dumps(meta).encode())
        log.info("acp session %s opened for %s", session_id, cwd)
        return NewSessionResponse(session_id=session_id, config_options=self.models.options())

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        channel = self._channel(session_id)
        entries = self.engine.sessions.entries(channel, since_reset=True)
        conn = self._conn()
        for entry in entries:
            if entry.get("type") != "message" or not isinstance(entry.get("text"), str):
                continue
            text = entry["text"]
            if entry.get("role") == "user":
                await conn.session_update(session_id, update_user_message_text(text))
            elif entry.get("role") == "assistant" and text:
                await conn.session_update(session_id, update_agent_message_text(text))
        return LoadSessionResponse(config_options=self.models.options())

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        found = []
        for directory in self.data_dir.glob(f"{CHANNEL_PREFIX}*"):
            meta = _meta(directory)
            if meta is None or (cwd is not None and meta.get("cwd") != cwd):
                continue
            session_id = directory.name.removeprefix(CHANNEL_PREFIX)
            if not SESSION_ID.fullmatch(session_id):
                continue
            found.append((directory.stat().st_mtime, session_id, meta))
        found.sort(reverse=True)
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=session_id,
                    cwd=str(meta.get("cwd") or self.data_dir),
                    title=str(meta.get("title") or "") or None,
                    updated_at=_iso(mtime),
                )
                for mtime, session_id, meta in found
            ]
        )

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> Any:
        self._channel(session_id)
        return self.models.choose(config_id, value)

    # -- turns --------------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        channel = self._channel(session_id)
        text, attachments = self._message(channel, prompt)
        self._title(channel, text)
        loop = asyncio.get_running_loop()
        stream = _UpdateStream(self._conn(), session_id, loop)
        token = self.engine.observers.register(channel, stream.observe)
        event = TransportEvent(channel=channel, text=text, user="editor", attachments=attachments)
        self._prompting.add(channel)
        try:
            try:
                ticket = await loop.run_in_executor(None, self.transport.submit, event, stream)
            except IrisError as exc:
                await stream.flush()
                raise RequestError.internal_error({"details": exc.message}) from None
            try:
                result = await loop.run_in_executor(None, ticket.wait)
            except asyncio.CancelledError:
                # The connection is closing (the editor went away): nobody will read this run,
                # and an executor thread still waiting on it would keep the process alive.
                self.engine.handle_stop(channel)
                raise
        finally:
            self._prompting.discard(channel)
            self.engine.observers.unregister(channel, token)
        if result.status in FAILED:
            stream.text(f"\n\n(Iris failed: {result.error or result.status})")
        await stream.flush()
        return PromptResponse(stop_reason="cancelled" if result.status == "stopped" else "end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        channel = self._channel(session_id)
        loop = asyncio.get_running_loop()
        stopped = await loop.run_in_executor(None, self.engine.handle_stop, channel)
        log.info(
            "acp session %s cancelled (a run was %s)",
            session_id,
            "stopped" if stopped else "not running",
        )

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def stop_all(self) -> None:
        """The editor went away: stop the runs it was waiting for (nobody will read them)."""
        for channel in list(self._prompting):
            self.engine.handle_stop(channel)

    # -- helpers ------------------------------------------------------------------------------

    def _conn(self) -> Client:
        assert self.conn is not None, "on_connect comes first"
        return self.conn

    def _channel(self, session_id: str) -> str:
        """The session's channel; an unknown or malformed id is the client's error."""
        channel = channel_of(session_id)
        if not SESSION_ID.fullmatch(session_id) or _meta(self.data_dir / channel) is None:
            raise RequestError.invalid_params({"sessionId": f"no such session: {session_id[:64]}"})
        return channel

    def _message(self, channel: str, prompt: list[Any]) -> tuple[str, tuple[Attachment, ...]]:
        """The prompt's text (embedded text resources appended, links named) and its images
        saved as the conversation's attachments."""
        parts: list[str] = []
        attachments: list[Attachment] = []
        for block in prompt:
            kind = getattr(block, "type", "")
            if kind == "text":
                parts.append(block.text)
            elif kind == "image":
                attachments.append(self._save_image(channel, block.mime_type, block.data))
            elif kind == "resource_link":
                parts.append(f"(linked: {block.uri})")
            elif kind == "resource":
                resource = block.resource
                body = getattr(resource, "text", None)
                if isinstance(body, str):
                    parts.append(f"\n--- {resource.uri}\n{body}")
        return "\n".join(parts).strip(), tuple(attachments)

    def _save_image(self, channel: str, mime: str, data: str) -> Attachment:
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            raise RequestError.invalid_params({"image": "data is not base64"}) from None
        name = f"image-{uuid.uuid4().hex[:12]}{IMAGE_SUFFIX.get(mime, '.bin')}"
        path = resolve_channel_path(self.data_dir, channel, "attachments", name)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_file(path, raw)
        return Attachment(str(path.relative_to(self.data_dir)), name)

    def _title(self, channel: str, text: str) -> None:
        """A session's title is its first prompt (for session/list)."""
        path = self.data_dir / channel / META_FILE
        meta = _meta(self.data_dir / channel) or {}
        if not meta.get("title") and text:
            meta["title"] = " ".join(text.split())[:TITLE_CHARS]
            write_private_file(path, json.dumps(meta).encode())


class _UpdateStream:
    """A prompt's updates, from engine threads to the editor, in order."""

    def __init__(self, conn: Client, session_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self._conn = conn
        self._session_id = session_id
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pump = loop.create_task(self._send())

    def _put(self, update: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, update)

    def text(self, text: str) -> None:
        self._put(update_agent_message_text(text))

    def tool(self, event: ToolEvent) -> None:
        if event.phase == "start":
            self._put(
                start_tool_call(
                    event.call_id,
                    event.name,
                    kind=event.kind,  # type: ignore[arg-type]  # one of ACP's kinds
                    status="in_progress",
                    raw_input=event.args,
                )
            )
            return
        result = event.result or ""
        self._put(
            update_tool_call(
                event.call_id,
                status="failed" if event.is_error else "completed",
                content=[tool_content(text_block(result))] if result else None,
                raw_output=result,
            )
        )

    def observe(self, event: dict[str, Any]) -> None:
        """The run's observer events: thinking becomes thought chunks (the rest streams above)."""
        if event.get("type") == "thinking" and event.get("text"):
            self._put(update_agent_thought_text(str(event["text"])))

    async def _send(self) -> None:
        while True:
            update = await self._queue.get()
            if update is None:
                return
            try:
                await self._conn.session_update(self._session_id, update)
            except Exception as exc:  # the editor went away: the run goes on, unseen
                log.info("acp session %s: an update was not delivered: %s", self._session_id, exc)

    async def flush(self) -> None:
        self._put(None)
        await self._pump


def _meta(directory: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((directory / META_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _iso(mtime: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(mtime, datetime.UTC).isoformat().replace("+00:00", "Z")

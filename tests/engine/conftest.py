"""An engine over a temp data dir with the scripted provider, and a transport that records
everything the engine asks of it (the engine's only view of a platform)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine
from iris_runtime.engine.tools import ToolRegistry
from iris_runtime.engine.transport import (
    ChannelInfo,
    ChannelState,
    ToolEvent,
    TransportEvent,
    TransportPromptProfile,
    UserInfo,
)
from iris_runtime.testing.scripted import ScriptedProvider
from iris_runtime.tools.plugin import register_tools
from iris_runtime.tools.sandbox import HostSandbox
from tests.transport_doubles import NoPlatform

PROFILE = TransportPromptProfile(
    transport_id="rec",
    identity_line="You are Iris on the recording platform.",
    formatting_section="Plain text.",
    directory_section=lambda channels, users: f"{len(channels)} channels, {len(users)} users",
    silent_note="Say [SILENT] to stay quiet.",
    attach_note="attach sends files",
    attachments_tag_name="rec_attachments",
    max_message_chars=4000,
)


@dataclass
class RecordingContext:
    message: TransportEvent
    transport_id: str = "rec"
    channel_name: str | None = None
    channels: list[ChannelInfo] = field(default_factory=list)
    users: list[UserInfo] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    on_tool_event: Callable[[ToolEvent], None] | None = None

    def __post_init__(self) -> None:
        self.on_tool_event = lambda event: self.calls.append(("tool", event))

    def respond(self, text: str, should_log: bool = True) -> None:
        self.calls.append(("respond", text))
        self.parts.append(text)

    def replace_message(self, text: str) -> None:
        self.parts = [text]

    def respond_in_thread(self, text: str) -> None:
        self.calls.append(("thread", text))
        self.parts.append(text)

    def set_typing(self, is_typing: bool) -> None:
        self.calls.append(("typing", is_typing))

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        self.calls.append(("upload", file_path))

    def set_working(self, working: bool) -> None:
        self.calls.append(("working", working))

    def delete_message(self) -> None:
        self.calls.append(("delete", None))
        self.parts = []

    def accumulated_text(self) -> str:
        return "\n\n".join(self.parts)

    def set_status(self, text: str) -> None:
        self.calls.append(("status", text))


class RecordingTransport(NoPlatform):
    transport_id = "rec"
    prompt_profile = PROFILE
    stop_command_hint = "stop"

    def __init__(self, engine: Engine, transport_id: str = "rec") -> None:
        self.engine = engine
        self.transport_id = transport_id
        self.contexts: list[RecordingContext] = []

    def owns_channel(self, channel_id: str) -> bool:
        return channel_id.startswith("rec-")

    def enqueue_event(self, event: TransportEvent) -> bool:
        self.engine.submit(self, event)
        return True

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> RecordingContext:
        ctx = RecordingContext(event, transport_id=self.transport_id)
        self.contexts.append(ctx)
        return ctx


@pytest.fixture
def script(tmp_path: Path) -> Callable[[list[dict[str, Any]]], None]:
    path = tmp_path / "script.json"
    path.write_text('{"rules": []}')

    def write(rules: list[dict[str, Any]]) -> None:
        path.write_text(json.dumps({"rules": rules}))

    return write


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    settings = Settings.from_env(
        {
            "IRIS_DATA_DIR": str(tmp_path / "data"),
            "IRIS_MAX_TURNS": "4",
            "IRIS_BASH_TIMEOUT_SECONDS": "10",
        }
    )
    settings.data_dir.mkdir()
    tools = ToolRegistry()
    register_tools(tools.register)
    engine = Engine(
        settings,
        ScriptedProvider(tmp_path / "script.json"),
        tools,
        sandboxes={"host": HostSandbox()},
    )
    yield engine
    engine.stop(timeout=5)


@pytest.fixture
def transport(engine: Engine) -> RecordingTransport:
    rec = RecordingTransport(engine)
    engine.add_transport(rec)
    return rec


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    done = threading.Event()
    deadline = timeout
    while deadline > 0 and not predicate():
        done.wait(0.02)
        deadline -= 0.02
    assert predicate(), "condition not reached in time"

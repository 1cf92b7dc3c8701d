"""An event service over a temp data dir, a ManualClock and a transport that records what it is
handed (and can refuse it, like a channel whose queue is full)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.engine.transport import (
    ChannelState,
    TransportEvent,
    TransportRegistry,
)
from iris_runtime.events.schedule import ManualClock
from iris_runtime.events.service import EventService
from tests.transport_doubles import NoPlatform

START = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


@dataclass
class FakeTransport(NoPlatform):
    """Owns every channel (or those with ``prefix``); accepts events unless told to refuse."""

    transport_id: str = "fake"
    prefix: str = ""
    accepted: list[TransportEvent] = field(default_factory=list)
    offers: int = 0
    refuse: bool = False
    # Raised by enqueue_event instead of taking the event (a broken channel).
    fail_with: BaseException | None = None
    # How the runs of events accepted from now on end, by text after the prompt's "] " (default
    # "done"; None: no reply is logged, as when the process died mid-run).
    outcome: dict[str, str | None] = field(default_factory=dict)
    endings: dict[int, str | None] = field(default_factory=dict)  # id(event) -> its run's end
    prompt_profile: Any = None
    stop_command_hint: str = "stop"

    def owns_channel(self, channel_id: str) -> bool:
        return channel_id.startswith(self.prefix)

    def enqueue_event(self, event: TransportEvent) -> bool:
        self.offers += 1
        if self.fail_with is not None:
            raise self.fail_with
        if self.refuse:
            return False
        self.accepted.append(event)
        self.endings[id(event)] = self.outcome.get(event.text.split("] ", 1)[-1], "done")
        return True

    def create_context(
        self, event: TransportEvent, state: ChannelState, is_event: bool = False
    ) -> Any:
        raise NotImplementedError("events never reach a context in these tests")

    def texts(self) -> list[str]:
        return [e.text for e in self.accepted]

    def log(self, channel: str) -> list[dict[str, Any]]:
        """What the engine's log of ``channel`` would hold had every accepted event run: its
        message, then its reply (status "done" unless ``outcome`` says otherwise)."""
        entries: list[dict[str, Any]] = []
        for number, event in enumerate(self.accepted):
            if event.channel != channel:
                continue
            run = f"run{number}"
            entries.append({"type": "message", "role": "user", "text": event.text, "runId": run})
            status = self.endings.get(id(event), "done")
            if status is not None:
                reply = {"type": "message", "role": "assistant", "text": "", "runId": run}
                entries.append({**reply, "status": status})
        return entries


@dataclass
class Harness:
    data_dir: Path
    clock: ManualClock
    transport: FakeTransport
    registry: TransportRegistry
    services: list[EventService] = field(default_factory=list)

    def service(self, cls: type[EventService] = EventService, **kwargs: Any) -> EventService:
        kwargs.setdefault("channel_log", self.transport.log)
        service = cls(self.data_dir, self.registry, clock=self.clock, **kwargs)
        service.open()
        self.services.append(service)
        return service

    def write(self, rel: str, body: dict[str, Any] | str | bytes) -> Path:
        path = self.data_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, dict):
            body = json.dumps(body)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        return path

    def step(self, service: EventService, seconds: float = 0.0) -> None:
        """Let ``seconds`` pass, then one watcher pass and one firing pass."""
        self.clock.advance(seconds)
        service.scan_once()
        service.tick()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    data = tmp_path / "data"
    data.mkdir()
    registry = TransportRegistry()
    transport = FakeTransport()
    registry.add(transport, fallback=True)
    h = Harness(data, ManualClock(START), transport, registry)
    yield h
    for service in h.services:
        service.stop()


def immediate(channel: str = "C1", text: str = "wake up") -> dict[str, str]:
    return {"type": "immediate", "channelId": channel, "text": text}


def one_shot(at: str, channel: str = "C1", text: str = "reminder") -> dict[str, str]:
    return {"type": "one-shot", "channelId": channel, "text": text, "at": at}


def periodic(
    schedule: str, timezone: str = "UTC", channel: str = "C1", text: str = "digest"
) -> dict[str, str]:
    return {
        "type": "periodic",
        "channelId": channel,
        "text": text,
        "schedule": schedule,
        "timezone": timezone,
    }

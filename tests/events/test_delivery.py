"""Events through a real runtime in this process: the built-in Bridge transport, the engine's
per-channel queue, the scripted provider, the real clock and the service's own threads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings
from iris_runtime.engine.scheduler import MAX_WAITING_PER_CHANNEL
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.runtime import Runtime

Start = Callable[..., Runtime]


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def start_runtime(tmp_path: Path) -> Iterator[Start]:
    started: list[Runtime] = []

    def start(rules: list[dict[str, Any]]) -> Runtime:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"rules": rules}))
        settings = Settings.from_env(
            {
                "IRIS_DATA_DIR": str(tmp_path / "data"),
                "IRIS_PROVIDER": "scripted",
                "IRIS_SCRIPT_FILE": str(script),
                "IRIS_LOAD_PLUGINS": "scripted",
                "IRIS_EVENTS_POLL_MS": "50",
            }
        )
        runtime = Runtime.build(settings)
        runtime.start()
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop()


def user_texts(runtime: Runtime, channel: str) -> list[str]:
    return [e["text"] for e in runtime.engine.sessions.entries(channel) if e.get("role") == "user"]


def drop(runtime: Runtime, name: str, body: dict[str, Any]) -> Path:
    path = runtime.settings.data_dir / "events" / name
    path.write_text(json.dumps(body))
    return path


def test_an_event_waits_for_a_full_queue_and_runs_once_it_has_room(start_runtime: Start) -> None:
    runtime = start_runtime([{"when": "slow", "turns": [[{"sleep": 60}]]}])
    bridge = runtime.engine.transports.get("bridge")
    assert isinstance(bridge, BridgeTransport)
    channel = "SESSION-busy"
    first = bridge.inject_session_message(TransportEvent(channel, "slow"))
    wait_for(lambda: runtime.engine.is_running(channel), "the slow run")
    waiting = [
        bridge.inject_session_message(TransportEvent(channel, f"m{i}"))
        for i in range(MAX_WAITING_PER_CHANNEL)
    ]
    path = drop(runtime, "later.json", {"type": "immediate", "channelId": channel, "text": "hi"})
    service = runtime.events
    assert service is not None
    wait_for(lambda: "events/later.json" in service.waiting(), "the event to be refused")
    assert path.exists(), "the file must stay while the queue refuses it"

    runtime.engine.handle_stop(channel)
    assert first.wait(20).status == "stopped"
    for ticket in waiting:
        ticket.wait(20)
    wait_for(lambda: not path.exists(), "the event to be accepted")
    wait_for(lambda: len(user_texts(runtime, channel)) == 7, "the event's run")
    texts = user_texts(runtime, channel)
    assert texts[:6] == ["slow", *[f"m{i}" for i in range(5)]]
    assert texts[6].startswith("[EVENT:events/later.json:immediate:") and texts[6].endswith("hi")


def test_a_silent_event_reply_posts_nothing(start_runtime: Start) -> None:
    runtime = start_runtime(
        [{"when": "[EVENT:", "turns": [[{"text": "[SILENT] nothing to report"}]]}]
    )
    channel = "SESSION-quiet"
    drop(runtime, "check.json", {"type": "immediate", "channelId": channel, "text": "inbox?"})
    wait_for(
        lambda: (
            [e.get("role") for e in runtime.engine.sessions.entries(channel)]
            == ["user", "assistant"]
        ),
        "the event's run",
    )
    user, reply = runtime.engine.sessions.entries(channel)
    assert user["text"].startswith("[EVENT:events/check.json:immediate:")
    assert reply["text"] == "" and reply["status"] == "done"
    # What follows the marker is dropped with it, as documented: neither posted nor logged.
    entries = runtime.engine.sessions.entries(channel)
    assert "nothing to report" not in json.dumps(entries)
    assert not any(e.get("posted") for e in entries)

"""Server-Sent Events for live watchers of a channel.

The observer is registered when the request arrives (so "connect first, then send" is reliable
and a ninth watcher is refused with 429 before any byte is sent) and unregistered when the
response closes, which gunicorn does as soon as a heartbeat write fails on a gone client.
"""

from __future__ import annotations

import contextlib
import json
import queue
from collections.abc import Iterator

from flask import Response

from iris_runtime.engine.observers import ObserverEvent, ObserverHub
from iris_runtime.web.capacity import STREAMS
from iris_runtime.web.slots import held_until_closed, hold

MAX_PENDING_EVENTS = 1000


def format_event(event: ObserverEvent) -> str:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event.get('type', 'message')}\ndata: {data}\n\n"


def observer_stream(hub: ObserverHub, channel: str, heartbeat_seconds: float) -> Response:
    pending: queue.Queue[ObserverEvent] = queue.Queue(maxsize=MAX_PENDING_EVENTS)

    def deliver(event: ObserverEvent) -> None:
        # A stalled client loses events rather than stalling the run.
        with contextlib.suppress(queue.Full):
            pending.put_nowait(event)

    slot = hold(STREAMS)  # 503 when every stream slot is taken
    with slot.released_on_failure():
        token = hub.register(channel, deliver)  # raises TooManyObservers → 429

    def events() -> Iterator[str]:
        yield ": connected\n\n"
        while True:
            try:
                event = pending.get(timeout=heartbeat_seconds)
            except queue.Empty:
                yield ": heartbeat\n\n"
                continue
            if event.get("type") == "closed":
                return
            yield format_event(event)

    response = Response(events(), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    held_until_closed(response, slot)  # first: it must run even if unregistering fails
    response.call_on_close(lambda: hub.unregister(channel, token))
    return response

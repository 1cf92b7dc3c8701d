"""Where a run's output goes: the transport's context, and live watchers if the run is observed.

A run is mirrored to watchers only if someone was watching when it started (``observed``), so a
watcher never sees half a turn.
"""

from __future__ import annotations

from pathlib import Path

from iris_runtime.engine.observers import ObserverEvent, ObserverHub
from iris_runtime.engine.provider import Usage
from iris_runtime.engine.transport import MessageContext, ToolEvent, clip_status
from iris_runtime.engine.usage import summary_line


class RunSink:
    def __init__(
        self,
        ctx: MessageContext,
        observers: ObserverHub,
        channel: str,
        data_dir: Path,
        *,
        observed: bool,
    ) -> None:
        self._ctx = ctx
        self._observers = observers
        self._channel = channel
        self._data_dir = data_dir
        self._observed = observed

    def _publish(self, event: ObserverEvent) -> None:
        if self._observed:
            self._observers.publish(self._channel, event)

    def respond(self, text: str) -> None:
        self._ctx.respond(text)

    def text_delta(self, text: str) -> None:
        """Text of the model turn in progress, as it streams, for transports that show it live
        (an optional ``on_text_delta`` hook on the context). The turn's whole text still arrives
        through ``respond``, which is what every transport must handle."""
        on_text_delta = getattr(self._ctx, "on_text_delta", None)
        if callable(on_text_delta):
            on_text_delta(text)

    def respond_in_thread(self, text: str) -> None:
        self._ctx.respond_in_thread(text)

    def delete_message(self) -> None:
        """Nothing will be said: the transport drops its placeholder, if it has one."""
        self._ctx.delete_message()

    def status(self, text: str) -> None:
        line = clip_status(text)
        self._ctx.set_status(line)
        self._publish({"type": "status", "text": line})

    def thinking(self, text: str) -> None:
        self._publish({"type": "thinking", "text": text})

    def tool_event(self, event: ToolEvent) -> None:
        if self._ctx.on_tool_event is not None:
            self._ctx.on_tool_event(event)
        self._publish({"type": "tool", **event.as_dict()})

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        self._ctx.upload_file(file_path, title)
        path = Path(file_path)
        shown = (
            str(path.relative_to(self._data_dir))
            if path.is_relative_to(self._data_dir)
            else path.name
        )
        self._publish({"type": "file", "path": shown, "title": title or path.name})

    def usage(self, usage: Usage) -> None:
        """A usage summary for transports that show one (an optional ``on_usage`` hook)."""
        on_usage = getattr(self._ctx, "on_usage", None)
        if callable(on_usage):
            on_usage(summary_line(usage), usage)

    def final(self, text: str) -> None:
        self._publish({"type": "final", "text": text})

    def accumulated(self) -> str:
        return self._ctx.accumulated_text()

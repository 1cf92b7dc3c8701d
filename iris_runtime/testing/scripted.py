"""The ``scripted`` provider: plays back tool calls and replies from a JSON script.

Point ``IRIS_SCRIPT_FILE`` at a file like::

    {"rules": [
        {"when": "list files", "turns": [
            [{"text": "Looking."}, {"tool": "bash", "args": {"command": "ls"}}],
            [{"text": "Done."}]
        ]},
        {"when": "slow", "turns": [[{"text": "partial"}, {"sleep": 30}, {"text": " never"}]]}
    ]}

The rule is the first whose ``when`` occurs in the latest user message (no match: echo the
message). The turn played is the number of model turns already taken since that message, so the
script is stateless and safe under concurrency. Steps: ``text``, ``thinking``, ``tool`` (+``args``,
``id``), ``sleep`` (seconds, interrupted by stop), ``error``, ``raise`` (a crash, as a buggy
provider would), ``usage``, and ``recall`` (replies
with every earlier user message in the context, joined by `` | ``, proving what was replayed).
The file is re-read on every call, so a test may rewrite it between turns. With
``IRIS_SCRIPT_CALLS_FILE`` set, every call is recorded there (one JSON line).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.provider import (
    Done,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

Step = dict[str, Any]


def _position(request: ProviderRequest) -> tuple[str, int]:
    """The latest user message, and how many model turns have followed it."""
    turns = 0
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text, turns
        if message.role == "assistant":
            turns += 1
    return "", turns


class ScriptedProvider:
    name = "scripted"

    def __init__(
        self,
        script_path: Path | None,
        calls_path: Path | None = None,
        context_window: int = 1_000_000,
    ) -> None:
        self._path = script_path
        self._calls = calls_path
        self.context_window = context_window

    def _rules(self) -> list[dict[str, Any]]:
        if self._path is None or not self._path.exists():
            return []
        rules = json.loads(self._path.read_text(encoding="utf-8")).get("rules", [])
        return rules if isinstance(rules, list) else []

    def _turn(self, prompt: str, index: int) -> list[Step]:
        for rule in self._rules():
            if str(rule.get("when", "")) in prompt:
                turns = rule.get("turns", [])
                return list(turns[index]) if index < len(turns) else []
        return [{"text": f"echo: {prompt}"}] if index == 0 else []

    def stream(self, request: ProviderRequest, abort: threading.Event) -> Iterator[ProviderEvent]:
        prompt, index = _position(request)
        if self._calls is not None:  # lets a test prove the model was (not) consulted
            with self._calls.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"prompt": prompt, "turn": index}) + "\n")
        try:
            steps = self._turn(prompt, index)
        except (OSError, ValueError) as exc:
            yield ProviderError(f"unreadable script: {exc}")
            return
        usage = Usage()
        for number, step in enumerate(steps):
            if abort.is_set():
                return
            if "sleep" in step:
                if abort.wait(float(step["sleep"])):
                    return
            elif "text" in step:
                yield TextDelta(str(step["text"]))
            elif "thinking" in step:
                yield ThinkingDelta(str(step["thinking"]))
            elif "tool" in step:
                call_id = str(step.get("id", f"call-{index}-{number}"))
                yield ToolCallEvent(
                    ToolCall(call_id, str(step["tool"]), dict(step.get("args", {})))
                )
            elif "recall" in step:
                earlier = [m.text for m in request.messages if m.role == "user"][:-1]
                yield TextDelta("recall: " + " | ".join(earlier))
            elif "error" in step:
                yield ProviderError(str(step["error"]))
                return
            elif "raise" in step:  # a provider bug: providers must never raise
                raise RuntimeError(str(step["raise"]))
            elif "usage" in step:
                usage = Usage(**step["usage"])
        yield Done("end_turn", usage)


def create(settings: Settings) -> ScriptedProvider:
    path = settings.env.get("IRIS_SCRIPT_FILE")
    calls = settings.env.get("IRIS_SCRIPT_CALLS_FILE")
    window = int(settings.env.get("IRIS_SCRIPTED_CONTEXT_WINDOW") or 1_000_000)
    return ScriptedProvider(Path(path) if path else None, Path(calls) if calls else None, window)


@hookimpl
def register_providers(register: Callable[[str, Any], None]) -> None:
    register("scripted", create)

"""Helpers shared by the provider tests: settings and providers pointed at the shipped fakes,
event collectors, and a registry with one tool for the malformed-arguments checks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from iris_runtime.config import Settings
from iris_runtime.engine.provider import (
    Message,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
)
from iris_runtime.engine.tools import ToolContext, ToolRegistry, ToolResult
from iris_runtime.providers import anthropic, openai_compat
from iris_runtime.testing.fake_llm import (
    FakeAnthropic,
    FakeOpenAI,
)

LS_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
LS = ToolSpec("ls", "List a folder.", LS_SCHEMA)
HELLO = ProviderRequest("You are Iris.", (Message("user", "hi"),), (LS,))


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {"IRIS_DATA_DIR": str(tmp_path), "IRIS_PROVIDER_MAX_RETRIES": "2", **env}
    )


def claude(tmp_path: Path, fake: FakeAnthropic, **env: str) -> anthropic.AnthropicProvider:
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url, **env}
    return anthropic.create(settings(tmp_path, **env))


def gpt(tmp_path: Path, fake: FakeOpenAI, **env: str) -> openai_compat.OpenAIProvider:
    env = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": fake.base_url, **env}
    return openai_compat.create(settings(tmp_path, **env))


def collect(provider: Any, request: ProviderRequest = HELLO) -> list[ProviderEvent]:
    return list(provider.stream(request, threading.Event()))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ProviderEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


def only_error(events: list[ProviderEvent]) -> ProviderError:
    errors = [e for e in events if isinstance(e, ProviderError)]
    assert len(errors) == 1 and events[-1] is errors[0], events
    return errors[0]


class NoSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float, abort: threading.Event) -> bool:
        self.waits.append(seconds)
        return False


# --- helpers for the tool-error checks -----------------------------------------------------------


class LsTool:
    name = "ls"
    description = "List a folder."
    parameters = LS_SCHEMA

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult("listed")


def registry_with_ls() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(LsTool())
    return registry


def tool_context(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, tmp_path, threading.Event(), lambda path, caption: None)

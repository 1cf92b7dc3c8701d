"""The ``anthropic`` and ``openai`` providers, driven directly against the wire-level fakes through
the real SDKs: streaming, tool calls, request shapes, usage and cost, retries, auth, faults and
abort."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.engine.agent import AgentLoop
from iris_runtime.engine.provider import (
    Message,
)
from iris_runtime.errors import ConfigError
from iris_runtime.plugins import PluginHost
from iris_runtime.providers import anthropic, openai_compat
from iris_runtime.providers import plugin as provider_plugin
from iris_runtime.testing import fake_llm
from iris_runtime.testing.fake_llm import (
    FakeAnthropic,
    Reply,
    Text,
)
from tests.providers.common import (
    claude,
    registry_with_ls,
    settings,
    tool_context,
)

# --- registration and start-up -------------------------------------------------------------------


def test_both_providers_are_registered(tmp_path: Path) -> None:
    config = settings(tmp_path, IRIS_LOAD_PLUGINS="")
    providers = PluginHost(config).providers()
    assert {"offline", "anthropic", "openai"} <= set(providers)
    assert isinstance(providers["anthropic"](config), anthropic.AnthropicProvider)
    assert isinstance(providers["openai"](config), openai_compat.OpenAIProvider)


def test_a_missing_sdk_is_a_clear_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sdk(name: str) -> None:
        raise ModuleNotFoundError("No module named 'openai'", name="openai")

    monkeypatch.setattr(provider_plugin.importlib, "import_module", no_sdk)
    with pytest.raises(ConfigError, match="needs the 'openai' package"):
        provider_plugin.on_demand("openai")(settings(tmp_path))


def test_unknown_model_is_a_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown model 'claude-nope'"):
        anthropic.create(settings(tmp_path, IRIS_MODEL="claude-nope"))


def test_a_missing_key_is_not_a_start_up_error(tmp_path: Path) -> None:
    assert anthropic.create(settings(tmp_path)).name == "anthropic"
    assert openai_compat.create(settings(tmp_path)).name == "openai"


def test_bad_thinking_budget_is_a_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="IRIS_THINKING_BUDGET"):
        anthropic.create(settings(tmp_path, IRIS_THINKING_BUDGET="100"))


def test_providers_expose_the_models_context_window(tmp_path: Path) -> None:
    assert anthropic.create(settings(tmp_path)).context_window == 1_000_000
    assert openai_compat.create(settings(tmp_path)).context_window == 1_047_576


class Output:
    """A RunOutput that keeps what the loop reports."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def respond(self, text: str) -> None:
        self.lines.append(f"reply: {text}")

    def status(self, text: str) -> None:
        self.lines.append(f"status: {text}")

    def text_delta(self, text: str) -> None:
        pass

    def thinking(self, text: str) -> None:
        pass

    def tool_event(self, event: Any) -> None:
        pass


def test_the_agent_loop_recovers_from_malformed_tool_json(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.enqueue(
        Reply([fake_llm.ToolCall("ls", "{not json", id="toolu_x")]),
        Reply([fake_llm.ToolCall("ls", {"path": "."}, id="toolu_y")]),
        Reply([Text("Done.")]),
    )
    loop = AgentLoop(claude(tmp_path, fake_anthropic), registry_with_ls(), max_turns=5)
    out = Output()
    outcome = loop.run(
        "sys", [Message("user", "list")], tool_context(tmp_path), out, threading.Event()
    )
    assert outcome.status == "done" and outcome.replies == ["Done."]
    first_result = fake_anthropic.requests[1]["body"]["messages"][-1]["content"][0]
    assert first_result["tool_use_id"] == "toolu_x" and first_result["is_error"] is True
    second_result = fake_anthropic.requests[2]["body"]["messages"][-1]["content"][0]
    assert second_result["content"] == "listed" and second_result["is_error"] is False

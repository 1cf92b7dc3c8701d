"""The models table: shipped defaults, data-dir overrides, and which model a runtime uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.providers.models import is_local_url, load_models, resolve_model


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"IRIS_DATA_DIR": str(tmp_path), **env})


def test_the_default_model_and_an_explicit_one(tmp_path: Path) -> None:
    assert resolve_model(settings(tmp_path), "anthropic").id == "claude-sonnet-5-5"
    chosen = resolve_model(settings(tmp_path, IRIS_MODEL="claude-haiku-4-5"), "anthropic")
    assert chosen.id == "claude-haiku-4-5" and chosen.price.input == 1.0


def test_sub_agents_use_their_default_model_unless_told(tmp_path: Path) -> None:
    agent = settings(tmp_path, AGENT_NAME="helper", IRIS_SUBAGENT_MODEL="claude-haiku-4-5")
    assert resolve_model(agent, "anthropic").id == "claude-haiku-4-5"
    own = settings(
        tmp_path,
        AGENT_NAME="helper",
        IRIS_SUBAGENT_MODEL="claude-haiku-4-5",
        IRIS_MODEL="claude-opus-5-5",
    )
    assert resolve_model(own, "anthropic").id == "claude-opus-5-5"
    iris = settings(tmp_path, IRIS_SUBAGENT_MODEL="claude-haiku-4-5")  # not a sub-agent
    assert resolve_model(iris, "anthropic").id == "claude-sonnet-5-5"


def test_the_data_dir_table_overrides_and_extends(tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text(
        "defaults: {openai: local-llama}\n"
        "models:\n"
        "  local-llama: {provider: openai, context_window: 8192, max_output_tokens: 1024}\n"
        "  claude-haiku-4-5:\n"
        "    provider: anthropic\n    context_window: 100\n    max_output_tokens: 10\n"
        "    price: {input: 9}\n"
    )
    table = load_models(settings(tmp_path))
    assert table.get("claude-haiku-4-5").price.input == 9  # type: ignore[union-attr]
    assert resolve_model(settings(tmp_path), "openai").id == "local-llama"
    assert table.get("claude-sonnet-5-5") is not None  # shipped entries stay


@pytest.mark.parametrize(
    "text",
    [
        "models: [",
        "models:\n  x: {provider: openai}\n",
        "models:\n  x: {provider: openai, context_window: 1, max_output_tokens: 1, colour: red}\n",
        "models:\n  x: {provider: openai, context_window: 1, max_output_tokens: 1, compat: {a: 1}}",
        "models:\n  x: {provider: openai, context_window: 1, max_output_tokens: 1, price: {a: 1}}",
    ],
)
def test_a_bad_table_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "models.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_models(settings(tmp_path))
    assert "models.yaml" in info.value.message


def test_unknown_models_fail_except_on_local_servers(tmp_path: Path) -> None:
    unknown = settings(tmp_path, IRIS_MODEL="mystery-9")
    with pytest.raises(ConfigError, match="unknown model 'mystery-9'"):
        resolve_model(unknown, "openai", "https://api.openai.com/v1")
    local = resolve_model(unknown, "openai", "http://127.0.0.1:11434/v1")
    assert local.id == "mystery-9" and local.price.input == 0
    with pytest.raises(ConfigError, match="belongs to provider"):
        resolve_model(settings(tmp_path, IRIS_MODEL="gpt-4.1"), "anthropic")


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:11434/v1", True),
        ("http://localhost:8000", True),
        ("http://192.168.1.20:1234/v1", True),
        ("http://gpu.internal/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://172.217.0.1", False),
        (None, False),
    ],
)
def test_local_server_detection(url: str | None, local: bool) -> None:
    assert is_local_url(url) is local

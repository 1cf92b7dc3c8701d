"""The models table: context window, output limit, prices and compatibility flags per model.

Shipped defaults live in ``models.yaml`` next to this module; ``<data>/models.yaml`` overrides or
adds entries (merged by model id). A model the table does not know is an error at start-up, except
on a local OpenAI-compatible server, where any model name is plausible: there a generic entry is
used and a warning names it.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlparse

import yaml

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.engine.provider import ModelPrice
from iris_runtime.errors import ConfigError

log = logging.getLogger(__name__)

LOCAL_CONTEXT_WINDOW = 32_768
LOCAL_MAX_OUTPUT = 4_096
_ENTRY_KEYS = {"provider", "context_window", "max_output_tokens", "price", "compat"}
_PRICE_KEYS = {"input", "output", "cache_read", "cache_write"}
COMPAT_FLAGS = {
    "developer_role",
    "max_tokens_field",
    "strict_tools",
    "reasoning_effort",
    "stream_usage",
}


@dataclass(frozen=True)
class ModelInfo:
    id: str
    provider: str
    context_window: int
    max_output_tokens: int
    price: ModelPrice = field(default_factory=lambda: ModelPrice(0.0, 0.0))
    compat: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelsTable:
    models: dict[str, ModelInfo]
    defaults: dict[str, str]

    def get(self, model_id: str) -> ModelInfo | None:
        return self.models.get(model_id)

    def default_for(self, provider: str) -> str | None:
        return self.defaults.get(provider)


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where} must be a positive integer, got {value!r}")
    return value


def _price(raw: Any, where: str) -> ModelPrice:
    if raw is None:
        return ModelPrice(0.0, 0.0)
    if not isinstance(raw, dict) or set(raw) - _PRICE_KEYS:
        raise ConfigError(f"{where}.price must map {sorted(_PRICE_KEYS)} to numbers")
    values: dict[str, float] = {}
    for key, value in raw.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where}.price.{key} must be a non-negative number")
        values[key] = float(value)
    return ModelPrice(
        values.get("input", 0.0),
        values.get("output", 0.0),
        values.get("cache_read", 0.0),
        values.get("cache_write", 0.0),
    )


def _entry(model_id: str, raw: Any, source: str) -> ModelInfo:
    where = f"{source}: models.{model_id}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
    provider = raw.get("provider")
    if not isinstance(provider, str) or not provider:
        raise ConfigError(f"{where}.provider must name a provider")
    compat = raw.get("compat") or {}
    if not isinstance(compat, dict) or set(compat) - COMPAT_FLAGS:
        raise ConfigError(f"{where}.compat: known flags are {sorted(COMPAT_FLAGS)}")
    return ModelInfo(
        id=model_id,
        provider=provider,
        context_window=_positive_int(raw.get("context_window"), f"{where}.context_window"),
        max_output_tokens=_positive_int(raw.get("max_output_tokens"), f"{where}.max_output_tokens"),
        price=_price(raw.get("price"), where),
        compat=dict(compat),
    )


def _read(text: str, source: str) -> tuple[dict[str, ModelInfo], dict[str, str]]:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"models", "defaults"}:
        raise ConfigError(f"{source} must be a mapping with 'models' and optional 'defaults'")
    models = doc.get("models") or {}
    defaults = doc.get("defaults") or {}
    if not isinstance(models, dict) or not isinstance(defaults, dict):
        raise ConfigError(f"{source}: 'models' and 'defaults' must be mappings")
    return (
        {str(k): _entry(str(k), v, source) for k, v in models.items()},
        {str(k): str(v) for k, v in defaults.items()},
    )


def load_models(settings: Settings) -> ModelsTable:
    shipped = resources.files("iris_runtime.providers").joinpath("models.yaml").read_text("utf-8")
    models, defaults = _read(shipped, "built-in models.yaml")
    override = settings.data_dir / data_layout.MODELS_YAML
    if override.exists():
        extra_models, extra_defaults = _read(override.read_text("utf-8"), str(override))
        models.update(extra_models)
        defaults.update(extra_defaults)
    return ModelsTable(models, defaults)


def is_local_url(base_url: str | None) -> bool:
    """Loopback and private hosts: a self-hosted server (Ollama, vLLM, llama.cpp, LM Studio)."""
    if not base_url:
        return False
    host = (urlparse(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal", ".lan")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_unspecified


def resolve_model(settings: Settings, provider: str, base_url: str | None = None) -> ModelInfo:
    """The model a provider should use: IRIS_MODEL, else (for a sub-agent) IRIS_SUBAGENT_MODEL,
    else the provider's default from the table."""
    table = load_models(settings)
    chosen = settings.model or (settings.subagent_model if settings.agent_name else "")
    chosen = chosen or table.default_for(provider) or ""
    if not chosen:
        raise ConfigError(
            f"IRIS_MODEL is not set and the models table has no default for {provider}"
        )
    info = table.get(chosen)
    if info is not None:
        if info.provider != provider:
            raise ConfigError(
                f"model {chosen!r} belongs to provider {info.provider!r}, "
                f"not IRIS_PROVIDER={provider!r}"
            )
        return info
    if is_local_url(base_url):
        log.warning(
            "model %r is not in the models table; using a generic local-server entry "
            "(context %d, no cost). Add it to %s to set its limits.",
            chosen,
            LOCAL_CONTEXT_WINDOW,
            settings.data_dir / data_layout.MODELS_YAML,
        )
        return ModelInfo(chosen, provider, LOCAL_CONTEXT_WINDOW, LOCAL_MAX_OUTPUT)
    known = ", ".join(sorted(m for m, i in table.models.items() if i.provider == provider))
    raise ConfigError(
        f"unknown model {chosen!r} for {provider} (known: {known}); add it to "
        f"{settings.data_dir / data_layout.MODELS_YAML}"
    )

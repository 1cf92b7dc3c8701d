"""Building a child run's agent: its model, thinking level, provider (with its own keys) and
tools, from the spawn's arguments and the configuration.

Model, in order: the spawn's ``model`` (when the models table knows it; otherwise a warning and
the next one), the target agent's ``subagents.model``, ``agents.defaults.subagents.model``, the
target agent's own ``model``, and last the caller's model. Tools: every tool but the session
tools; ``tools.subagents.tools`` and the agent's ``tools`` apply, ``deny`` first.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from iris_runtime.config import Settings
from iris_runtime.engine.agent import AgentSetup
from iris_runtime.engine.filecache import signature
from iris_runtime.engine.provider import THINKING_LEVELS, Provider
from iris_runtime.engine.tools import ToolRegistry
from iris_runtime.session_agents.config import (
    MAIN,
    SESSION_TOOLS,
    AgentEntry,
    SessionAgentsConfig,
)
from iris_runtime.session_agents.profiles import instructions, load_profiles

if TYPE_CHECKING:
    from iris_runtime.providers.models import ModelsTable

NESTING_REFUSAL = "sub-agents cannot spawn sub-agents or use the session tools (no nesting)"
# agents_list only answers "whom may sessions_spawn name", a question a sub-agent cannot act on.
CHILD_EXCLUDED = SESSION_TOOLS | {"agents_list"}


@dataclass(frozen=True)
class ChildAgent:
    setup: AgentSetup
    model: str
    thinking: str
    warnings: tuple[str, ...]


class ModelCatalog:
    """The models table, re-read when ``models.yaml`` in the data dir changes."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._cached: tuple[object, ModelsTable] | None = None

    def table(self) -> ModelsTable:
        # Imported on first use: the models table needs YAML, which a serving process
        # that never spawns a sub-agent (or never names a model) does not load.
        from iris_runtime import data_layout
        from iris_runtime.providers.models import load_models

        sig = signature(self._settings.data_dir / data_layout.MODELS_YAML)
        with self._lock:
            if self._cached is None or self._cached[0] != sig:
                self._cached = (sig, load_models(self._settings))
            return self._cached[1]

    def knows(self, model: str) -> bool:
        return self.table().get(model) is not None

    def priced(self, model: str) -> bool:
        info = self.table().get(model)
        return info is not None and (info.price.input > 0 or info.price.output > 0)

    def provider_of(self, model: str) -> str | None:
        info = self.table().get(model)
        return info.provider if info else None


class ChildBuilder:
    def __init__(
        self,
        settings: Settings,
        main_provider: Provider,
        factories: Mapping[str, Callable[[Settings], Provider]],
        tools: ToolRegistry,
        models: ModelCatalog,
    ) -> None:
        self._settings = settings
        self._main_provider = main_provider
        self._factories = factories
        self._tools = tools
        self.models = models
        self._providers: dict[tuple[str, str, str], Provider] = {}
        self._lock = threading.Lock()

    def build(
        self,
        config: SessionAgentsConfig,
        agent: AgentEntry,
        caller_model: str,
        args: Mapping[str, Any],
    ) -> ChildAgent:
        """Raises ProfileError (a bad auth-profiles.json) or ConfigError (no such provider)."""
        warnings: list[str] = []
        model = self._model(config, agent, caller_model, args.get("model"), warnings)
        thinking = self._thinking(agent, args.get("thinking"), warnings)
        provider = self._provider(agent, model)
        setup = AgentSetup(
            instructions(agent.directory),
            self.tools_for(config, agent),
            provider,
            model,
            thinking,
        )
        return ChildAgent(setup, model, thinking, tuple(warnings))

    def _model(
        self,
        config: SessionAgentsConfig,
        agent: AgentEntry,
        caller_model: str,
        requested: object,
        warnings: list[str],
    ) -> str:
        fallback = agent.subagent_model or config.default_model or agent.model or caller_model
        if isinstance(requested, str) and requested.strip():
            if self.models.knows(requested.strip()):
                return requested.strip()
            shown = fallback or "the provider's default model"
            warnings.append(
                f"model {requested.strip()!r} is not in the models table; the sub-agent runs "
                f"on {shown} instead"
            )
        return fallback

    @staticmethod
    def _thinking(agent: AgentEntry, requested: object, warnings: list[str]) -> str:
        if isinstance(requested, str) and requested:
            if requested in THINKING_LEVELS:
                return requested
            warnings.append(
                f"thinking {requested!r} is not one of {', '.join(THINKING_LEVELS)}; ignored"
            )
        return agent.thinking

    def tools_for(self, config: SessionAgentsConfig, agent: AgentEntry) -> ToolRegistry:
        def keep(name: str) -> bool:
            return (
                name not in CHILD_EXCLUDED
                and config.tools.permits(name)
                and agent.tools.permits(name)
            )

        return self._tools.subset(keep, dict.fromkeys(CHILD_EXCLUDED, NESTING_REFUSAL))

    def _provider(self, agent: AgentEntry, model: str) -> Provider:
        """The main provider when the agent has no keys of its own and the model is the main
        provider's; otherwise one built for the agent (its keys over main's, over the
        environment), kept for later spawns."""
        name = (self.models.provider_of(model) if model else None) or self._settings.provider
        main_profiles = load_profiles(self._settings.data_dir)
        profiles = main_profiles
        if agent.id != MAIN:
            profiles = load_profiles(agent.directory).over(main_profiles)
        env = profiles.environment(name, self._settings.env)
        if name == self._settings.provider and env == dict(self._settings.env):
            return self._main_provider
        # Keyed by a digest, so the keys themselves are not kept twice in memory.
        key = (agent.id, name, hashlib.sha256(repr(sorted(env.items())).encode()).hexdigest())
        with self._lock:
            provider = self._providers.get(key)
            if provider is None:
                factory = self._factories.get(name)
                if factory is None:
                    from iris_runtime.errors import ConfigError

                    raise ConfigError(f"model {model!r} needs provider {name!r}, not installed")
                settings = replace(self._settings, provider=name, model=model, env=env)
                provider = factory(settings)
                self._providers[key] = provider
            return provider

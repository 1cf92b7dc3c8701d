"""The plugin host: built-in plugins, then the ``iris`` entry points the allow-list admits.

``IRIS_LOAD_PLUGINS`` (comma-separated entry-point names) restricts which external plugins load;
unset means all of them, empty means none. Built-ins always load. ``IRIS_TRACE_PLUGINS=1`` logs
every hook call. A plugin that fails to import or implements a hook that does not exist is
rejected and reported (``iris plugins``, ``iris doctor``) instead of being half-loaded.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pluggy

from iris_runtime import PROJECT_NAME, hookspecs
from iris_runtime.config import Settings
from iris_runtime.engine.transport import ChannelShape

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "iris"
BUILTIN_PLUGINS = {
    "bridge": "iris_runtime.bridge.plugin",
    "channel_modes": "iris_runtime.channel_modes.plugin",
    "custom_agents": "iris_runtime.custom_agents.plugin",
    "providers": "iris_runtime.providers.plugin",
    "secrets": "iris_runtime.secrets.plugin",
    "tools": "iris_runtime.tools.plugin",
}


@dataclass(frozen=True)
class PluginInfo:
    name: str
    source: str  # "builtin" or the distribution that provides it
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class TransportFactory:
    build: Callable[[Any], Any]
    fallback: bool = False


@dataclass(frozen=True)
class BlueprintEntry:
    blueprint: Any  # a Flask blueprint, or a function returning one (imported when served)
    surface: str = "api"

    def resolve(self) -> Any:
        """The blueprint itself. A plugin may register a function instead, so that a surface
        that is not served (the Web UI without its port) costs no import."""
        return self.blueprint() if callable(self.blueprint) else self.blueprint


@dataclass
class PluginHost:
    settings: Settings
    manager: pluggy.PluginManager = field(init=False)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    _sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.manager = pluggy.PluginManager(PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        if self.settings.trace_plugins:
            self.manager.trace.root.setwriter(
                lambda message: log.info("plugin trace: %s", message.rstrip())
            )
            self.manager.enable_tracing()
        for name, module_name in BUILTIN_PLUGINS.items():
            self._register(name, functools.partial(importlib.import_module, module_name), "builtin")
        self._load_entry_points()

    def _load_entry_points(self) -> None:
        allowed = self.settings.load_plugins
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if allowed is not None and ep.name not in allowed:
                self.skipped.append(ep.name)
                continue
            source = ep.dist.name if ep.dist else "unknown"
            self._register(ep.name, ep.load, source)
        if allowed is not None:
            installed = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
            present = installed | set(BUILTIN_PLUGINS)  # naming a built-in is harmless
            for missing in sorted(set(allowed) - present):
                self.errors[missing] = "named in IRIS_LOAD_PLUGINS but no such plugin is installed"

    def _register(self, name: str, load: Callable[[], Any], source: str) -> None:
        try:
            plugin = load()
            self.manager.register(plugin, name=name)
        except Exception as exc:
            self.errors[name] = f"failed to load: {type(exc).__name__}: {exc}"
            log.error("plugin %s %s", name, self.errors[name])
            return
        try:
            self.manager.check_pending()
        except pluggy.PluginValidationError as exc:
            self.manager.unregister(name=name)
            self.errors[name] = f"rejected: {exc}"
            log.error("plugin %s rejected: %s", name, exc)
            return
        self._sources[name] = source

    # -- what is loaded -----------------------------------------------------------------------

    def plugins(self) -> list[PluginInfo]:
        out = []
        for name, plugin in self.manager.list_name_plugin():
            if name not in self._sources:
                continue
            hooks = tuple(sorted(h.name for h in self.manager.get_hookcallers(plugin) or []))
            out.append(PluginInfo(name, self._sources[name], hooks))
        return out

    def module(self, name: str) -> ModuleType | None:
        plugin = self.manager.get_plugin(name)
        return plugin if isinstance(plugin, ModuleType) else None

    # -- collecting contributions -------------------------------------------------------------

    def transports(self) -> list[TransportFactory]:
        found: list[TransportFactory] = []
        self.manager.hook.register_transports(
            register=lambda factory, fallback=False: found.append(
                TransportFactory(factory, fallback)
            ),
            settings=self.settings,
        )
        return found

    def channel_shapes(self) -> list[ChannelShape]:
        found: list[ChannelShape] = []

        def register(shape: ChannelShape) -> None:
            if not isinstance(shape, ChannelShape):
                raise TypeError(f"register_channel_shapes wants a ChannelShape, not {shape!r}")
            found.append(shape)

        self.manager.hook.register_channel_shapes(register=register)
        return found

    def tools(self) -> list[Any]:
        found: list[Any] = []
        self.manager.hook.register_tools(register=found.append)
        return found

    def skills(self) -> list[Path]:
        found: list[Path] = []
        self.manager.hook.register_skills(register=lambda path: found.append(Path(path)))
        return found

    def providers(self) -> dict[str, Any]:
        return self._named("register_providers", "provider")

    def secret_backends(self) -> dict[str, Any]:
        return self._named("register_secret_backends", "secret backend")

    def sandboxes(self) -> dict[str, Any]:
        return self._named("register_sandboxes", "sandbox")

    def blueprints(self) -> list[BlueprintEntry]:
        found: list[BlueprintEntry] = []

        def register(blueprint: Any, surface: str = "api") -> None:
            if surface not in {"api", "webui"}:
                raise ValueError(f"unknown blueprint surface {surface!r} (api or webui)")
            found.append(BlueprintEntry(blueprint, surface))

        self.manager.hook.register_blueprints(register=register)
        return found

    def add_commands(self, cli: click.Group) -> None:
        self.manager.hook.register_commands(cli=cli)

    def engine_started(self, engine: Any) -> None:
        self.manager.hook.engine_started(engine=engine)

    def engine_stopping(self, engine: Any) -> None:
        self.manager.hook.engine_stopping(engine=engine)

    def _named(self, hook: str, kind: str) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def register(name: str, value: Any) -> None:
            if name in found:
                raise ValueError(f"{kind} {name!r} registered twice")
            found[name] = value

        getattr(self.manager.hook, hook)(register=register)
        return found

"""Assembly: settings + plugins → a ready Engine with its provider, tools and transports.

This is the one place that knows both the plugin host and the engine, which keeps the engine
free of plugin imports. The web layer and the CLI build a :class:`Runtime` and nothing else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from iris_runtime.config import Settings
from iris_runtime.engine.channels import reserve_folder
from iris_runtime.engine.core import Engine
from iris_runtime.engine.tools import ToolRegistry
from iris_runtime.errors import ConfigError
from iris_runtime.plugins import PluginHost
from iris_runtime.private_files import UnsafeFile
from iris_runtime.secrets.broker import SecretBroker
from iris_runtime.secrets.selection import broker_for
from iris_runtime.tools.sandbox import split_level
from iris_runtime.tools.sandbox.configured import configured_sandbox
from iris_runtime.tools.sandbox.view import attachment_shower

if TYPE_CHECKING:
    from iris_runtime.events.service import EventService
    from iris_runtime.session_agents.service import SessionAgents

log = logging.getLogger(__name__)


def prepare_data_dir(settings: Settings) -> None:
    """Create the data dir private to this user (0700); tighten an existing one."""
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = settings.data_dir.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(settings.data_dir, 0o700)


def check_selection(settings: Settings, host: PluginHost) -> None:
    """The configured provider and sandbox level exist among the loaded plugins."""
    for variable, chosen, known in (
        ("IRIS_PROVIDER", settings.provider, host.providers()),
        ("IRIS_SANDBOX", split_level(settings.sandbox)[0], host.sandboxes()),
    ):
        if chosen not in known:
            names = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"{variable}={chosen!r} is not installed (known: {names})")


def with_subagent_lane(settings: Settings) -> Settings:
    """``agents.defaults.subagents.maxConcurrent`` from session-agents.json, when it sets one,
    is the width of the ``subagent`` lane (else ``IRIS_LANE_SUBAGENT``)."""
    from iris_runtime.session_agents import config as agents_config
    from iris_runtime.session_agents.setup import ModelCatalog

    config = agents_config.load(settings.data_dir, ModelCatalog(settings).knows)
    if config.max_concurrent is None:
        return settings
    return replace(settings, lane_subagent=config.max_concurrent)


def _session_agents(runtime: Runtime) -> SessionAgents | None:
    import sqlite3

    from iris_runtime.session_agents.install import install
    from iris_runtime.session_agents.service import SessionAgents

    try:
        service = SessionAgents(runtime.engine, runtime.settings, runtime.host.providers())
    except (sqlite3.Error, OSError, UnsafeFile) as exc:
        log.error("session sub-agents are off: state.db cannot be used (%s)", exc)
        return None
    install(service)
    runtime.on_start(service.start)
    runtime.on_stop(service.stop)
    return service


@dataclass
class Runtime:
    settings: Settings
    host: PluginHost
    engine: Engine
    secrets: SecretBroker
    # Scheduled events (events/ folders); started last, once routers and tools are in place.
    events: EventService | None = None
    # Background sub-agents spawned from conversations (None when state.db is unusable).
    subagents: SessionAgents | None = None
    _stopped: bool = False
    _on_start: list[Callable[[], None]] = field(default_factory=list)
    _on_stop: list[Callable[[], None]] = field(default_factory=list)

    def on_start(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the runtime starts (before plugins' ``engine_started`` and the
        transports)."""
        self._on_start.append(callback)

    def on_stop(self, callback: Callable[[], None]) -> None:
        self._on_stop.append(callback)

    @classmethod
    def build(cls, settings: Settings, host: PluginHost | None = None) -> Runtime:
        prepare_data_dir(settings)
        host = host or PluginHost(settings)
        check_selection(settings, host)
        tools = ToolRegistry()
        for tool in host.tools():
            tools.register(tool)
        settings = with_subagent_lane(settings)
        provider = host.providers()[settings.provider](settings)
        sandbox = configured_sandbox(settings, host.sandboxes(), host.skills())
        engine = Engine(
            settings,
            provider,
            tools,
            extra_skills=host.skills(),
            sandboxes={settings.sandbox: sandbox},
            show_attachment=attachment_shower(sandbox, settings.data_dir),
        )
        for transport in host.transports():
            engine.add_transport(transport.build(engine), fallback=transport.fallback)
        # Declared by installed transports even when they are off, so their ids are refused
        # (404/409) instead of falling through to the bridge catch-all.
        for shape in host.channel_shapes():
            engine.transports.declare(shape)
        # Each claiming transport has an <id>/events/ folder: never a channel's.
        for name in {t.transport_id for t in engine.transports.claiming()} | {
            s.transport_id for s in engine.transports.shapes()
        }:
            reserve_folder(name)
        runtime = cls(settings, host, engine, broker_for(settings, host.secret_backends()))
        # Imported here, in the serving process: `iris serve`'s master only checks the selection.
        from iris_runtime.events.service import EventService
        from iris_runtime.provision.supervisor import Supervisor

        runtime.events = EventService.for_engine(engine)
        runtime.subagents = _session_agents(runtime)
        # Sub-agents in process mode (no systemd) are children of the running Iris.
        supervisor = Supervisor.from_settings(settings)
        runtime.on_start(supervisor.start)
        runtime.on_stop(supervisor.stop)
        return runtime

    def start(self) -> None:
        # Plugins add routers and tools in engine_started; transports start only after, so a
        # message waiting at start-up (a chat backlog) finds every @agent route in place.
        for callback in self._on_start:
            callback()
        self.host.engine_started(self.engine)
        self.engine.start()
        if self.events is not None:
            self.events.start()
        log.info(
            "Iris engine started: provider=%s transports=%s",
            self.settings.provider,
            ",".join(t.transport_id for t in self.engine.transports.all()),
        )

    def stop(self) -> None:
        """Stop once (gunicorn's exit hooks and atexit may all call this)."""
        if self._stopped:
            return
        self._stopped = True
        if self.events is not None:
            self.events.stop()
        try:
            self.host.engine_stopping(self.engine)
        except Exception:
            log.exception("a plugin failed in engine_stopping")
        for callback in self._on_stop:
            callback()
        self.engine.stop()

"""Session sub-agents (spec 001), assembled: spawn, follow-up messages, stop, lookup.

One :class:`SessionAgents` lives in each serving process. The runtime builds it with the engine,
and :func:`~.install.install` adds what the feature needs through the engine's public hooks
only. Its memory is ``state.db`` (see :mod:`.store`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.engine.core import Engine
from iris_runtime.engine.filecache import FileCache
from iris_runtime.engine.provider import Provider
from iris_runtime.errors import ConfigError
from iris_runtime.session_agents import config as agents_config
from iris_runtime.session_agents.archive import Archiver
from iris_runtime.session_agents.config import MAIN, SessionAgentsConfig
from iris_runtime.session_agents.delivery import AnnounceDelivery
from iris_runtime.session_agents.events import subagent_event
from iris_runtime.session_agents.lifecycle import Lifecycle, RunLive
from iris_runtime.session_agents.profiles import ProfileError
from iris_runtime.session_agents.setup import ChildBuilder, ModelCatalog
from iris_runtime.session_agents.store import UNFINISHED, RunRecord, SubagentStore
from iris_runtime.session_agents.transport import (
    CHANNEL_PREFIX,
    SubagentTransport,
    is_child_channel,
)

log = logging.getLogger(__name__)

CLEANUPS = ("keep", "delete")
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
MAX_LABEL_CHARS = 120


class SpawnRefused(Exception):
    """A spawn (or send) that cannot happen; the message is the tool's error result."""


@dataclass(frozen=True)
class Origin:
    """The chat a spawn came from, and who spawned."""

    channel: str
    transport_id: str
    thread: str | None
    run_id: str  # the spawning run: its reply is posted before any announce
    agent_id: str = MAIN
    model: str = ""


@dataclass(frozen=True)
class RunHandle:
    record: RunRecord
    live: RunLive

    def wait_for_reply(self, timeout: float, abort: threading.Event) -> dict[str, Any]:
        result = self.live.wait(timeout, abort)
        if result is None:
            return {"status": "pending", "note": "no reply yet; it is still working"}
        return {"status": result.status, "reply": result.text}


class SessionAgents:
    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        factories: Mapping[str, Callable[[Settings], Provider]],
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.models = ModelCatalog(settings)
        self._configs: FileCache[SessionAgentsConfig] = FileCache(
            lambda path: agents_config.load(settings.data_dir, self.models.knows),
            missing=lambda path: agents_config.defaults(settings.data_dir),
        )
        self.builder = ChildBuilder(settings, engine.provider, factories, engine.tools, self.models)
        self.store = SubagentStore(settings.data_dir / data_layout.STATE_DB)
        self.transport = SubagentTransport(engine.sessions, self._started)
        self.lifecycle = Lifecycle(
            engine,
            self.store,
            self.transport,
            archive_minutes=lambda: self.config().archive_after_minutes,
            priced=self.models.priced,
            announced=self._announced,
        )
        self.delivery = AnnounceDelivery(engine, self.store, self._announce_delivered)
        self.archiver = Archiver(
            engine, self.store, self.lifecycle.running_in, self.lifecycle.session_lock
        )
        self._problem_logged: str | None = None

    # -- life of the service --------------------------------------------------------------

    def start(self) -> None:
        """Settle what a previous process left, then deliver and archive (before transports
        start, so a backlog's ``/subagents`` finds everything in place)."""
        self.lifecycle.recover()
        self.delivery.start()
        self.archiver.start()

    def stop(self) -> None:
        self.archiver.stop()
        self.delivery.stop()

    def config(self) -> SessionAgentsConfig:
        config = self._configs.get(str(agents_config.config_path(self.settings.data_dir)))
        if config.problem and config.problem != self._problem_logged:
            log.error("session agents: %s; running with the defaults (main only)", config.problem)
        self._problem_logged = config.problem
        return config

    def _started(self, channel: str) -> None:
        self.lifecycle.started(channel)

    def _announced(self) -> None:
        self.delivery.wake()
        self.archiver.wake()

    def _announce_delivered(self, run: RunRecord) -> None:
        self.lifecycle.schedule_archive(run, time.time(), delivered=True)
        self.archiver.wake()

    # -- spawning -------------------------------------------------------------------------

    def spawn(self, origin: Origin, args: Mapping[str, Any]) -> dict[str, Any]:
        """Accept a sub-agent run and queue it; the tool result. Raises SpawnRefused."""
        if is_child_channel(origin.channel):
            raise SpawnRefused("sub-agents cannot spawn sub-agents (no nesting)")
        config = self.config()
        agent_id = _text(args.get("agentId")) or origin.agent_id
        allowed = config.allowed_for(origin.agent_id)
        if agent_id not in config.agents:
            raise SpawnRefused(
                f"unknown agentId {agent_id!r}; agents_list shows the ids you may use "
                f"({', '.join(allowed)})"
            )
        if agent_id not in allowed:
            raise SpawnRefused(
                f"agentId {agent_id!r} is not allowed for {origin.agent_id!r} "
                f"(allowed: {', '.join(allowed)}); see subagents.allowAgents"
            )
        cleanup = _text(args.get("cleanup")) or "keep"
        if cleanup not in CLEANUPS:
            raise SpawnRefused("cleanup must be 'keep' or 'delete'")
        timeout = _timeout(args.get("runTimeoutSeconds"))
        try:
            child = self.builder.build(config, config.agents[agent_id], origin.model, args)
        except (ProfileError, ConfigError) as exc:
            raise SpawnRefused(f"agent {agent_id!r} cannot run: {exc}") from None
        session = str(uuid.uuid4())
        record = self.store.add_run(
            RunRecord(
                run_id=uuid.uuid4().hex[:16],
                kind="spawn",
                session_key=f"agent:{agent_id}:subagent:{session}",
                child_channel=CHANNEL_PREFIX + session,
                origin_channel=origin.channel,
                origin_transport=origin.transport_id,
                origin_thread=origin.thread,
                origin_run=origin.run_id,
                agent_id=agent_id,
                label=clean_label(args.get("label")),
                task=str(args["task"]),
                model=child.model,
                thinking=child.thinking,
                cleanup=cleanup,
                timeout_seconds=timeout,
                seq=0,
                **_not_started(),
            )
        )
        self.engine.notify(origin.channel, subagent_event(record, None, "spawned"))
        self.lifecycle.launch(record, child.setup)
        accepted: dict[str, Any] = {
            "status": "accepted",
            "runId": record.run_id,
            "childSessionKey": record.session_key,
            "index": record.seq,
        }
        if child.warnings:
            accepted["warnings"] = list(child.warnings)
        return accepted

    def send(
        self, origin_channel: str, spawn: RunRecord, message: str, *, announce: bool = False
    ) -> RunHandle:
        """A follow-up message into a finished sub-agent's session: a new run there. With
        ``announce`` (``/subagents send``) its end is announced like the first run's;
        otherwise the caller waits on the handle (``sessions_send``). Raises SpawnRefused for
        a sub-agent still working or archived."""
        config = self.config()
        agent = config.agents.get(spawn.agent_id)
        if agent is None:
            raise SpawnRefused(f"agent {spawn.agent_id!r} is no longer configured")
        args = {"model": spawn.model, "thinking": spawn.thinking}
        try:
            child = self.builder.build(config, agent, spawn.model, args)
        except (ProfileError, ConfigError) as exc:
            raise SpawnRefused(f"agent {spawn.agent_id!r} cannot run: {exc}") from None
        # Under the session lock: the archiver cannot rename the transcript between the
        # checks and the launch, nor a second message slip in beside this one.
        with self.lifecycle.session_lock:
            fresh = self.store.spawn_of(spawn.session_key) or spawn
            if fresh.archived is not None:
                raise SpawnRefused(f"sub-agent #{spawn.seq} is archived; spawn a new one")
            if self.is_active(fresh):
                raise SpawnRefused(
                    f"sub-agent #{spawn.seq} is still working; send again when it has finished"
                )
            record = self.store.add_run(
                replace(
                    fresh,
                    run_id=uuid.uuid4().hex[:16],
                    kind="message" if announce else "send",
                    task=message,
                    origin_channel=origin_channel,
                    origin_run=self.engine.running_run(origin_channel) or "",
                    timeout_seconds=0.0,
                    **_not_started(),
                )
            )
            live = self.lifecycle.launch(record, child.setup, announce=announce)
        return RunHandle(record, live)

    # -- stopping and finding -------------------------------------------------------------

    def stop_spawned_from(self, channel: str) -> bool:
        """The stop cascade: every sub-agent spawned from ``channel`` that is still running."""
        stopped = False
        for record in self.active_runs(channel):
            stopped = self.lifecycle.stop(record) or stopped
        return stopped

    def active_runs(self, origin_channel: str) -> list[RunRecord]:
        return [r for r in self.store.unfinished() if r.origin_channel == origin_channel]

    def spawns(self, origin_channel: str, *, archived: bool = False) -> list[RunRecord]:
        return [r for r in self.store.spawns_of(origin_channel) if archived or r.archived is None]

    def current_run(self, spawn: RunRecord) -> RunRecord:
        """The latest run in ``spawn``'s session (a follow-up, or the spawn itself)."""
        runs = self.store.runs_of_session(spawn.session_key)
        return runs[-1] if runs else spawn

    def is_active(self, spawn: RunRecord) -> bool:
        return self.current_run(spawn).state in UNFINISHED


def _not_started() -> dict[str, Any]:
    """The fields of a run that was just accepted."""
    return {
        "state": "queued",
        "outcome": None,
        "notes": "",
        "usage": "{}",
        "created": time.time(),
        "started": None,
        "ended": None,
        "archive_at": None,
        "archived": None,
    }


def clean_label(value: object) -> str:
    """A label as people see it: one line, no quotes (a label is the model's words and must
    not pass for a line of the announce, such as a ``Status:``), at most 120 characters."""
    text = " ".join(_text(value).replace('"', "'").split())
    return text[:MAX_LABEL_CHARS]


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _timeout(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SpawnRefused("runTimeoutSeconds must be a number of seconds, 0 or more")
    if value > MAX_TIMEOUT_SECONDS:
        raise SpawnRefused(f"runTimeoutSeconds is at most {MAX_TIMEOUT_SECONDS} (a week)")
    return float(value)

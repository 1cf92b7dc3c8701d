"""Custom agents in a serving Iris: the catalog, the chats, the open turns and the reach socket,
started with the engine and stopped with it.

:meth:`CustomAgents.ask` is the one way a relay turn runs, whoever asked: an ``@kind`` message
on any transport, the Web UI's picker, or Iris's own model through its tool.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from iris_runtime.agents.registry import registry_for
from iris_runtime.config import Settings
from iris_runtime.custom_agents.catalog import Catalog
from iris_runtime.custom_agents.chats import ChatBook
from iris_runtime.custom_agents.ratelimit import RateLimit
from iris_runtime.custom_agents.relay import RelayError, message_body, post_turn, send_stop
from iris_runtime.custom_agents.settings import (
    RATE_BURST,
    RATE_PER_WINDOW,
    CustomAgentSettings,
)
from iris_runtime.custom_agents.signin import READY, UNAVAILABLE, status_of
from iris_runtime.custom_agents.turns import OpenTurns, TurnOutput
from iris_runtime.data_layout import CUSTOM_AGENTS_DIR
from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import Attachment
from iris_runtime.errors import ConfigError, IrisError

log = logging.getLogger(__name__)

_services: weakref.WeakKeyDictionary[Engine, CustomAgents] = weakref.WeakKeyDictionary()


def service_of(engine: Engine) -> CustomAgents | None:
    """The custom agents of a started engine (None before ``engine_started``, or without)."""
    return _services.get(engine)


@dataclass(frozen=True)
class TurnResult:
    text: str
    status: str  # done | stopped | failed
    error: str | None = None


def bridge_names_for(settings: Settings) -> Callable[[], Collection[str]]:
    """The names of registered bridge sub-agents, which no manifest may take as its kind."""
    registry = registry_for(settings)

    def names() -> Collection[str]:
        try:
            return registry.names()
        except IrisError as exc:  # an unreadable agents.json must not stop manifests loading
            log.error("agents.json is unreadable: %s", exc.message)
            return ()

    return names


class CustomAgents:
    def __init__(self, engine: Engine, config: CustomAgentSettings) -> None:
        self.engine = engine
        self.config = config
        self.catalog = Catalog(config.manifests_dir, bridge_names_for(engine.settings))
        self.chats = ChatBook(engine.settings.data_dir / CUSTOM_AGENTS_DIR)
        self.turns = OpenTurns()
        self.rate = RateLimit(RATE_PER_WINDOW, config.rate_window_seconds, RATE_BURST)
        self._closers: list[Callable[[], None]] = []
        _services[engine] = self

    def start(self) -> None:
        from iris_runtime.custom_agents.reach import ReachServer

        self.catalog.watch(self.config.watch_seconds)
        reach = ReachServer(self, self.config.reach_socket, self.config.reach_group)
        try:
            reach.start()
        except (OSError, ConfigError) as exc:
            # Not fatal: Iris serves on, her custom agents just cannot reply until this is fixed
            # (a unix socket path may be at most 107 bytes; set IRIS_REACH_SOCKET).
            log.error("the reach socket cannot listen on %s: %s", reach.path, exc)
        else:
            self._closers.append(reach.stop)
        if self.config.relay_inbound_port is not None:
            from iris_runtime.custom_agents.inbound import RelayInbound

            inbound = RelayInbound(self, self.config.relay_inbound_port)
            inbound.start()
            self._closers.append(inbound.stop)

    def stop(self) -> None:
        # Open turns end the way a restart ends them: from now on their requests are refused.
        self.turns.end_all("shutdown")
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                log.exception("stopping %s failed", close)
        self.catalog.stop_watching()

    # -- asking an agent ----------------------------------------------------------------------

    def ask(
        self,
        kind: str,
        channel: str,
        text: str,
        attachments: Sequence[Attachment],
        output: TurnOutput,
        abort: threading.Event,
        off_lane: Callable[[], AbstractContextManager[None]],
        origin: str = "user",
    ) -> TurnResult:
        agent = self.catalog.get(kind)
        if agent is None:
            return TurnResult("", "failed", f"no custom agent named {kind!r} is loaded")
        manifest = agent.manifest
        status = status_of(manifest)
        if status == UNAVAILABLE:
            return TurnResult("", "failed", "ACP agents cannot be run by this Iris yet")
        if status != READY:
            hint = f"iris custom-agents setup {kind} --provider <id>"
            return TurnResult("", "failed", f"it needs sign-in first: {hint}")
        assert manifest.relay is not None
        chat_id = self.chats.id_for(channel)
        turn = self.turns.open(kind, chat_id, output)
        settings = self.engine.settings
        body = message_body(
            chat_id, turn.turn_id, text, attachments, settings.data_dir, settings.workspace, origin
        )
        try:
            session = post_turn(manifest.relay, body, self.config.post_timeout_seconds)
        except RelayError as exc:
            self.turns.end(turn, "failed")
            return TurnResult(turn.text(), "failed", str(exc))
        if session is not None:
            self.chats.record_session(chat_id, session)
        turn.touch()  # the silence clock starts when the POST is accepted
        with off_lane():  # waiting on the agent is not compute
            reason = turn.wait(abort, self.config.silence_seconds)
        if reason in {"stopped", "silence"} and not self.turns.end(turn, reason):
            reason = turn.ended or reason  # turn.done won the race: it finished after all
        return self._result(turn.text(), reason, manifest.relay, chat_id, turn.turn_id)

    def _result(self, text: str, reason: str, url: str, chat_id: str, turn_id: str) -> TurnResult:
        if reason == "done":
            return TurnResult(text, "done")
        if reason == "stopped":
            send_stop(url, chat_id, turn_id, self.config.post_timeout_seconds)
            return TurnResult(text, "stopped")
        if reason == "silence":
            quiet = f"{self.config.silence_seconds:g} s"
            return TurnResult(text, "failed", f"it went silent: nothing arrived for {quiet}")
        return TurnResult(text, "failed", "Iris stopped before the agent finished")

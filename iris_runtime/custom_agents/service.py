"""Custom agents in a serving Iris: the catalog, the chats and the open turns, started with the
engine and stopped with it (the sockets agents reach Iris by are :mod:`.listeners`).

:meth:`CustomAgents.ask` is the one way a relay turn runs, whoever asked: an ``@kind`` message
on any transport, the Web UI's picker, or Iris's own model through its tool.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from iris_runtime.agents.registry import registry_for
from iris_runtime.config import Settings
from iris_runtime.custom_agents.acp_grants import ToolGrants
from iris_runtime.custom_agents.acp_models import is_model_command, model_command
from iris_runtime.custom_agents.catalog import Catalog, LoadedAgent
from iris_runtime.custom_agents.chats import ChatBook
from iris_runtime.custom_agents.ratelimit import RateLimit
from iris_runtime.custom_agents.relay import RelayError, message_body, post_turn, send_stop
from iris_runtime.custom_agents.settings import (
    RATE_BURST,
    RATE_PER_WINDOW,
    CustomAgentSettings,
)
from iris_runtime.custom_agents.signin import READY, status_of
from iris_runtime.custom_agents.turns import OpenTurns, TurnOutput, TurnResult
from iris_runtime.data_layout import CUSTOM_AGENTS_DIR
from iris_runtime.engine.core import Engine
from iris_runtime.engine.transport import Attachment
from iris_runtime.errors import IrisError

if TYPE_CHECKING:
    from iris_runtime.custom_agents.acp_host import AcpHost

log = logging.getLogger(__name__)

_services: weakref.WeakKeyDictionary[Engine, CustomAgents] = weakref.WeakKeyDictionary()


def service_of(engine: Engine) -> CustomAgents | None:
    """The custom agents of a started engine (None before ``engine_started``, or without)."""
    return _services.get(engine)


def bridge_names_for(settings: Settings) -> Callable[[], Collection[str]]:
    """The names of registered bridge sub-agents, which no manifest may take as its kind."""
    registry = registry_for(settings)
    logged: list[str] = []  # asked on every scan: say each trouble once

    def names() -> Collection[str]:
        try:
            found = registry.names()
        except IrisError as exc:  # an unreadable agents.json must not stop manifests loading
            if logged != [exc.message]:
                log.error("agents.json is unreadable: %s", exc.message)
                logged[:] = [exc.message]
            return ()
        logged.clear()
        return found

    return names


class CustomAgents:
    def __init__(self, engine: Engine, config: CustomAgentSettings) -> None:
        self.engine = engine
        self.config = config
        self.catalog = Catalog(config.manifests_dir, bridge_names_for(engine.settings))
        self.chats = ChatBook(engine.settings.data_dir / CUSTOM_AGENTS_DIR)
        self.turns = OpenTurns()
        self.rate = RateLimit(RATE_PER_WINDOW, config.rate_window_seconds, RATE_BURST)
        self.grants = ToolGrants()  # ACP agents' MCP tools: one token per agent process
        self._closers: list[Callable[[], None]] = []
        self._acp: AcpHost | None = None
        self._acp_lock = threading.Lock()
        _services[engine] = self

    @property
    def acp(self) -> AcpHost:
        """The ACP host, made on first use: an Iris with no ACP agent never loads the SDK."""
        with self._acp_lock:
            if self._acp is None:
                from iris_runtime.custom_agents.acp_host import AcpHost

                settings = self.engine.settings
                self._acp = AcpHost(
                    self.chats, self.config, settings.data_dir, settings.workspace, self.grants
                )
            return self._acp

    def start(self) -> None:
        """Watch the manifests; the sockets agents reach Iris by start after (``listeners``)."""
        self.catalog.watch(self.config.watch_seconds)

    def on_stop(self, close: Callable[[], None]) -> None:
        """Call ``close`` on :meth:`stop` (the last registered first)."""
        self._closers.append(close)

    def stop(self) -> None:
        # Open turns end the way a restart ends them: from now on their requests are refused.
        self.turns.end_all("shutdown")
        if self._acp is not None:
            self._acp.stop()
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                log.exception("stopping %s failed", close)
        self.catalog.stop_watching()

    def tool_environment(self, channel: str) -> dict[str, str]:
        """What a command run in ``channel`` needs to reach this Iris as the spec's scripts do:
        the conversation's chat id and the reach socket (``wireling note`` with no ``--chat``
        then lands in this chat)."""
        socket_path = str(self.config.reach_socket)
        return {
            "IRONWIRE_CHAT_ID": self.chats.id_for(channel),
            "IRIS_REACH_SOCKET": socket_path,
            "WIRELING_REACH_SOCK": socket_path,
        }

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
        if manifest.shape == "acp":
            chat_id = self.chats.id_for(channel)
            if is_model_command(text):
                return TurnResult(model_command(self.chats, manifest, chat_id, text), "done")
            return self.acp.ask(manifest, chat_id, text, attachments, output, abort, off_lane)
        status = status_of(manifest)
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
        self.turns.end(turn, reason)  # ended already (by wait, or elsewhere): now forgotten too
        return self._result(turn.text(), reason, manifest.relay, chat_id, turn.turn_id)

    def restart(self, kind: str) -> LoadedAgent | None:
        """An agent restart: the manifest is read again and a live ACP process is killed."""
        if self._acp is not None:
            self._acp.restart(kind)
        return self.catalog.restart(kind)

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

"""The Engine: accepts events, hands runs to the scheduler (one per channel, five waiting, on
lanes), runs the agent loop, logs every turn, and stops runs through a single path
(:meth:`Engine.handle_stop`)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from iris_runtime.config import Settings
from iris_runtime.data_layout import CHANNELS_JSON
from iris_runtime.engine.agent import AgentLoop, AgentSetup
from iris_runtime.engine.channels import resolve_channel_dir
from iris_runtime.engine.compaction import compact_history
from iris_runtime.engine.dispatch_config import ChannelModes
from iris_runtime.engine.lanes import DEFAULT_LANE, Lanes, LaneSlot
from iris_runtime.engine.observers import ObserverHub
from iris_runtime.engine.output import RunSink
from iris_runtime.engine.prompt import build_system_prompt, user_prompt
from iris_runtime.engine.provider import Message, Provider
from iris_runtime.engine.results import crashed_result, outcome_result
from iris_runtime.engine.routing import MessageRouter, route_run
from iris_runtime.engine.run_log import log_message, log_reply
from iris_runtime.engine.runs import RunResult, RunTicket
from iris_runtime.engine.scheduler import Run, RunScheduler
from iris_runtime.engine.sessions import SessionStore
from iris_runtime.engine.skills import discover_skills
from iris_runtime.engine.tools import Sandbox, ToolContext, ToolRegistry
from iris_runtime.engine.transport import (
    ChannelEventSink,
    ChannelState,
    ChannelTransport,
    MessageContext,
    PromptProfileRegistry,
    TransportEvent,
    TransportPromptProfile,
    TransportRegistry,
)
from iris_runtime.errors import IrisError, QueueFull

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        settings: Settings,
        provider: Provider,
        tools: ToolRegistry,
        *,
        extra_skills: list[Path] | None = None,
        sandboxes: dict[str, Sandbox] | None = None,
        show_attachment: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings
        # An attachment's handle -> the path the model's tools reach it by (at an isolated
        # level, a copy in the sandbox's view); by default its host path.
        self._show_attachment = show_attachment
        self.provider = provider
        self.tools = tools
        self.transports = TransportRegistry()
        self.prompt_profiles = PromptProfileRegistry()
        self.sessions = SessionStore(settings.data_dir)
        self.observers = ObserverHub()
        # channels.json (spec 003's channel modes), read by the transports that drive them
        self.channel_modes = ChannelModes(settings.data_dir / CHANNELS_JSON, settings.data_dir)
        self._extra_skills = list(extra_skills or [])
        self.sandboxes = dict(sandboxes or {})
        self._routers: list[MessageRouter] = []
        self._routers_lock = threading.Lock()
        self._stop_listeners: list[Callable[[str], bool]] = []
        self._tool_environments: list[Callable[[str], Mapping[str, str]]] = []
        lanes = Lanes(
            {
                "main": settings.lane_main,
                "subagent": settings.lane_subagent,
                "events": settings.lane_events,
            }
        )
        self._scheduler = RunScheduler(lanes, self._execute, self._never_ran)
        self._loop = AgentLoop(provider, tools, max_turns=settings.max_turns, model=settings.model)
        self.started = False  # whether the transports have started taking messages

    # -- transports ---------------------------------------------------------------------------

    def add_transport(
        self, transport: ChannelTransport, *, fallback: bool = False, internal: bool = False
    ) -> None:
        self.transports.add(transport, fallback=fallback, internal=internal)
        self.prompt_profiles.register(transport.prompt_profile)

    def start(self) -> None:
        """Start the transports: from here on messages arrive. Routers and tools must already
        be in place (the runtime calls ``engine_started`` before this)."""
        for transport in self.transports.all():
            log.info("starting transport %s", transport.transport_id)
            transport.start()
        self.started = True

    # -- accepting work -----------------------------------------------------------------------

    def dispatch(self, event: TransportEvent, *, is_event: bool = False) -> bool:
        """Route an event to the transport that owns its channel (its own queue decides)."""
        return self.transports.owner(event.channel).enqueue_event(event)

    def submit(
        self,
        transport: ChannelTransport,
        event: TransportEvent,
        *,
        is_event: bool = False,
        lane: str = DEFAULT_LANE,
        setup: AgentSetup | None = None,
    ) -> RunTicket:
        """Queue a run for the event's channel; raises QueueFull when five are already waiting.
        With ``setup`` the run uses that agent (a sub-agent's) instead of Iris's own."""
        resolve_channel_dir(self.settings.data_dir, event.channel)  # validates the id early
        run_id = uuid.uuid4().hex[:16]
        run = Run(
            run_id,
            event.channel,
            transport.transport_id,
            event,
            is_event,
            lane,
            RunTicket(run_id, event.channel),
            setup=setup,
        )
        self._scheduler.submit(run)
        return run.ticket

    def submit_event(self, transport: ChannelTransport, event: TransportEvent) -> RunTicket | None:
        """A synthetic event's run (scheduled, or ``POST /channels/<id>/events``) on the
        ``events`` lane: what a transport's ``enqueue_event`` does. None, logged, when the
        channel's queue is full: the sender decides whether to retry (the events service does,
        the API answers 429)."""
        try:
            return self.submit(transport, event, is_event=True, lane="events")
        except QueueFull as exc:
            log.warning(
                "%s: refusing an event for %s: %s",
                transport.transport_id,
                event.channel,
                exc.message,
            )
            return None

    # -- stopping -----------------------------------------------------------------------------

    def handle_stop(self, channel: str) -> bool:
        """Abort the channel's running run; its waiter still gets the text produced so far.

        This is the one stop path for every transport and the API. Returns whether a run was
        running (a run still waiting for a lane slot ends at once, never having run), or
        whether a stop listener stopped something it owns (a sub-agent spawned from here)."""
        stopped = self._scheduler.stop(channel)
        for listener in list(self._stop_listeners):
            try:
                stopped = listener(channel) or stopped
            except Exception:
                log.exception("a stop listener failed for %s", channel)
        return stopped

    def add_stop_listener(self, listener: Callable[[str], bool]) -> None:
        """Call ``listener(channel)`` on every stop of ``channel``, whatever path it came by;
        it returns whether it stopped something of its own (so the caller hears "stopped")."""
        self._stop_listeners.append(listener)

    def notify(self, channel: str, event: dict[str, Any]) -> None:
        """Tell people watching ``channel`` about something outside a run (a sub-agent spawned
        or finished): live watchers (SSE) and transports that show such events."""
        self.observers.publish(channel, event)
        try:
            transport = self.transports.owner(channel)
        except IrisError:
            return
        if isinstance(transport, ChannelEventSink):
            _quietly(lambda e: transport.on_channel_event(channel, e), event)

    def is_running(self, channel: str) -> bool:
        return self._scheduler.is_running(channel)

    def running_run(self, channel: str) -> str | None:
        """The id of the run in progress on ``channel`` (None when it is idle)."""
        return self._scheduler.running_run(channel)

    def begin_shutdown(self) -> None:
        """Refuse new work, abort running runs and cancel waiting ones; cheap and signal-safe
        enough to call from a SIGTERM handler."""
        if self._scheduler.begin_shutdown():
            self.observers.close_all()

    def stop(self, timeout: float = 10.0) -> None:
        self.begin_shutdown()
        for transport in reversed(self.transports.all()):
            try:
                transport.stop()
            except Exception:
                log.exception("transport %s failed to stop", transport.transport_id)
        if not self._scheduler.join(timeout):
            log.warning("runs still busy after %.0fs; exiting anyway", timeout)

    def _never_ran(self, run: Run, reason: str) -> None:
        """The message was accepted, so it is logged even though it never ran; watchers of a
        run stopped before it started still see it end."""
        log_message(self.sessions, run, status="cancelled", reason=reason)
        if reason == "stopped" and self.observers.is_observed(run.channel):
            self.observers.publish(run.channel, {"type": "final", "text": ""})

    # -- running ------------------------------------------------------------------------------

    def _execute(self, run: Run, slot: LaneSlot) -> RunResult:
        try:
            return self._run(run, slot)
        except Exception as exc:  # before the run could say anything (no context yet)
            log.exception("run %s on %s crashed", run.run_id, run.channel)
            code = exc.code if isinstance(exc, IrisError) else "run_crashed"
            result = RunResult(run.run_id, "failed", f"(run failed: {exc})", str(exc), code)
            log_reply(self.sessions, run, result)
            return result

    def _run(self, run: Run, slot: LaneSlot) -> RunResult:
        transport = self.transports.get(run.transport_id)
        directory = resolve_channel_dir(self.settings.data_dir, run.channel, create=True)
        state = ChannelState(run.channel, directory, running=True)
        ctx = transport.create_context(run.event, state, run.is_event)
        history = self.sessions.context(run.channel)
        log_message(self.sessions, run)
        profile = self.prompt_profiles.get(ctx.transport_id)
        sink = RunSink(
            ctx,
            self.observers,
            run.channel,
            self.settings.data_dir,
            observed=self.observers.is_observed(run.channel),
        )
        ctx.set_working(True)
        try:
            routed = (
                None
                if run.setup is not None
                else route_run(self._routers, run, sink, lambda: slot.off_lane(run.abort))
            )
            result = routed or self._think(run, ctx, profile, sink, history, slot)
        except Exception as exc:
            log.exception("run %s on %s crashed", run.run_id, run.channel)
            result = crashed_result(run, sink, exc)
        finally:
            _quietly(ctx.set_working, False)
        log_reply(self.sessions, run, result)
        _quietly(sink.final, result.text)  # the reply is logged: a broken watcher changes nothing
        return result

    def add_router(self, router: MessageRouter, *, first: bool = False) -> None:
        """Offer every message to ``router`` before the model sees it (see engine.routing);
        ``first``: before the routers already added (a passthrough channel's relay must win
        over ``/commands`` and ``@mentions``)."""
        # Replaced, not appended to, so a run iterating the routers never sees the list change.
        with self._routers_lock:
            self._routers = [router, *self._routers] if first else [*self._routers, router]

    def add_tool_environment(self, contribute: Callable[[str], Mapping[str, str]]) -> None:
        """Add variables to the environment of the commands tools run in a channel:
        ``contribute(channel)`` returns them (custom agents give the chat's id, say)."""
        self._tool_environments = [*self._tool_environments, contribute]

    def _tool_environment(self, channel: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for contribute in self._tool_environments:
            try:
                env.update(contribute(channel))
            except Exception:  # a variable missing is better than a run failing
                log.exception("the tool environment for %s could not be made", channel)
        return env

    def _think(
        self,
        run: Run,
        ctx: MessageContext,
        profile: TransportPromptProfile,
        sink: RunSink,
        history: list[Message],
        slot: LaneSlot,
    ) -> RunResult:
        """The model's turn: the agent loop over the provider and the tools (Iris's own, or
        those of the run's :class:`AgentSetup`)."""
        setup = run.setup
        system = (
            "\n\n".join([setup.system, *self._sandbox_section()])
            if setup
            else self._system_prompt(profile, ctx)
        )
        provider = setup.provider if setup else self.provider
        loop = AgentLoop.for_setup(setup, self.settings.max_turns) if setup else self._loop
        tool_ctx = ToolContext(
            workspace=self.settings.workspace,
            channel_dir=resolve_channel_dir(self.settings.data_dir, run.channel),
            abort=run.abort,
            upload_file=sink.upload_file,
            timeout_seconds=self.settings.bash_timeout_seconds,
            output_max_chars=self.settings.tool_output_max_chars,
            sandbox=self.settings.sandbox,
            sandboxes=self.sandboxes,
            channel=run.channel,
            status=sink.status,
            off_lane=lambda: slot.off_lane(run.abort),
            run_id=run.run_id,
            transport_id=run.transport_id,
            thread=run.event.thread,
            model=setup.model if setup else self.settings.model,
            env=self._tool_environment(run.channel),
        )
        user = Message(
            "user",
            user_prompt(
                run.event,
                profile.attachments_tag_name,
                self.settings.data_dir,
                self._show_attachment,
            ),
        )
        history = compact_history(
            self.sessions,
            provider,
            setup.model if setup else self.settings.model,
            run.channel,
            run.run_id,
            run.abort,
            system,
            history,
            user,
            sink.status,
        )
        outcome = loop.run(system, [*history, user], tool_ctx, sink, run.abort)
        if outcome.silent and not outcome.replies:
            # Nothing to say (typical of events): the transport drops its placeholder, if any.
            ctx.delete_message()
        return outcome_result(run, outcome, ctx.accumulated_text(), sink)

    def _system_prompt(self, profile: TransportPromptProfile, ctx: MessageContext) -> str:
        skills = discover_skills(self.settings.workspace, self._extra_skills)
        return build_system_prompt(
            profile,
            self.settings.workspace,
            skills=skills,
            channels=ctx.channels,
            users=ctx.users,
            extra_sections=[r.prompt_section() for r in self._routers] + self._sandbox_section(),
        )

    def _sandbox_section(self) -> list[str]:
        """Where a sandboxed command's workspace is (the paths above are the host's)."""
        section = getattr(self.sandboxes.get(self.settings.sandbox), "prompt_section", None)
        return [section()] if callable(section) else []


def _quietly(call: Callable[[Any], None], value: Any) -> None:
    """Call a transport or watcher hook whose failure must not undo a finished run."""
    try:
        call(value)
    except Exception:
        log.exception("%s failed", getattr(call, "__qualname__", "a run hook"))

"""Admin commands, answered without a model turn in ``admin`` channels only::

    /agents             the registered sub-agents and the custom agents
    /events             the event files and when each runs next
    /channels           the channel modes in force (and a problem with channels.json)
    /channels reload    read channels.json now

A transport's dispatch already refuses everyone but the admins, yet runs also start elsewhere
(Iris's API, a custom agent's reach ``run``, which is refused in admin channels): so the router
checks the event's user against the channel's admins itself, and answers nobody else.
``/subagents`` is its own router and works here as everywhere.
"""

from __future__ import annotations

from iris_runtime.agents.registry import registry_for
from iris_runtime.custom_agents.router import picker_entries
from iris_runtime.engine.core import Engine
from iris_runtime.engine.dispatch import REFUSAL, DispatchConfig, split_conversation
from iris_runtime.engine.routing import RouteOutcome, RouteRequest
from iris_runtime.errors import IrisError
from iris_runtime.events.catalog import list_events
from iris_runtime.events.files import folders_on_disk
from iris_runtime.events.schedule import SystemClock

MAX_LINES = 50


class AdminCommands:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def prompt_section(self) -> str:
        return ""

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        command = request.slash_command("agents", "events", "channels")
        if command is None:
            return None
        channel, _ = split_conversation(request.event.channel)
        modes = self._engine.channel_modes
        rule = modes.current().rule_for(channel)
        if rule is None or rule.mode != "admin":
            return None  # elsewhere it is an ordinary message
        if request.event.user not in rule.admins:
            return RouteOutcome(REFUSAL)
        verb, rest = command[0], command[1].lower()
        if verb == "agents":
            return RouteOutcome(self._agents())
        if verb == "events":
            return RouteOutcome(self._events())
        if rest == "reload":
            config = modes.reload()
            if modes.problem:
                return RouteOutcome(f"channels.json was not applied: {modes.problem}")
            return RouteOutcome("Reloaded channels.json.\n" + describe(config))
        if rest:
            return RouteOutcome("Usage: /channels [reload]")
        text = describe(modes.current())
        if modes.problem:
            text += f"\nchannels.json on disk is not in force: {modes.problem}"
        return RouteOutcome(text)

    def _agents(self) -> str:
        lines = []
        try:
            registry = registry_for(self._engine.settings).load()
        except IrisError as exc:
            lines.append(f"agents.json is unreadable: {exc.message}")
            registry = {}
        lines += [
            f"@{name}  sub-agent at {entry.bridge_url}" for name, entry in sorted(registry.items())
        ]
        lines += [
            f"@{entry['name']}  custom agent {entry['label']} ({entry['status']})"
            for entry in picker_entries(self._engine)
        ]
        return "\n".join(lines[:MAX_LINES]) or "No sub-agents or custom agents."

    def _events(self) -> str:
        data_dir = self._engine.settings.data_dir
        entries = list_events(data_dir, folders_on_disk(data_dir), SystemClock().now())
        lines = []
        for entry in entries[:MAX_LINES]:
            if entry["status"] == "rejected":
                lines.append(f"{entry['id']}  rejected: {entry['error']}")
            else:
                lines.append(
                    f"{entry['id']}  {entry['type']} on {entry['channelId']}, next {entry['next']}"
                )
        return "\n".join(lines) or "No events."


def describe(config: DispatchConfig) -> str:
    lines = [
        f"{channel}: {_rule_text(rule.as_json())}"
        for channel, rule in sorted(config.channels.items())
    ]
    if config.defaults is not None:
        lines.append(f"other channels: {_rule_text(config.defaults.as_json())}")
    return "\n".join(lines) or "No channel modes: every channel keeps its usual behaviour."


def _rule_text(rule: dict[str, object]) -> str:
    extra = ""
    if "agent" in rule:
        extra = f" to {rule['agent']}"
    elif "admins" in rule:
        admins = rule["admins"]
        assert isinstance(admins, list)
        extra = f" (admins {', '.join(admins)})"
    return f"{rule['mode']}{extra}"

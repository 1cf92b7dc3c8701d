"""``/subagents``: inspect and control a chat's sub-agents, answered without a model turn.

A router, so every transport (Slack, Telegram, the Web UI, API sessions) gets it the same way::

    /subagents list
    /subagents stop <id|#|all>
    /subagents log <id|#> [limit] [tools]
    /subagents info <id|#>
    /subagents send <id|#> <message>
"""

from __future__ import annotations

import re
import time

from iris_runtime.engine.routing import RouteOutcome, RouteRequest
from iris_runtime.session_agents.announce import format_runtime
from iris_runtime.session_agents.events import runtime_seconds, status_of
from iris_runtime.session_agents.lookup import NotFoundHere, find_spawn, transcript_lines
from iris_runtime.session_agents.service import SessionAgents, SpawnRefused
from iris_runtime.session_agents.store import RunRecord

USAGE = (
    "Usage: /subagents list | stop <id|#|all> | log <id|#> [limit] [tools] | info <id|#> | "
    "send <id|#> <message>"
)
_NUMBER = re.compile(r"[0-9]{1,9}")  # ASCII digits only: "²".isdigit() is True
DEFAULT_LOG_LIMIT = 20
MAX_LOG_LIMIT = 200


class SubagentsCommand:
    """The ``/subagents`` router."""

    def __init__(self, service: SessionAgents) -> None:
        self._service = service

    def prompt_section(self) -> str:
        return ""

    def route(self, request: RouteRequest) -> RouteOutcome | None:
        command = request.slash_command("subagents")
        if command is None:
            return None
        words = command[1].split(maxsplit=2)
        verb = words[0].lower() if words else "list"
        handler = {
            "list": self._list,
            "stop": self._stop,
            "log": self._log,
            "info": self._info,
            "send": self._send,
        }.get(verb)
        if handler is None:
            return RouteOutcome(f"Unknown /subagents command {verb!r}. {USAGE}")
        try:
            text = handler(request.event.channel, words[1:])
        except (NotFoundHere, SpawnRefused) as exc:
            text = str(exc)
        return RouteOutcome(text)

    # -- verbs ------------------------------------------------------------------------------

    def _list(self, channel: str, args: list[str]) -> str:
        spawns = self._service.spawns(channel)
        if not spawns:
            return "No sub-agents in this chat."
        lines = [f"Sub-agents of this chat ({len(spawns)}):"]
        lines += [self._line(self._service.current_run(s), s) for s in spawns]
        return "\n".join(lines)

    def _stop(self, channel: str, args: list[str]) -> str:
        if not args:
            return "Usage: /subagents stop <id|#|all>"
        if args[0].lower() == "all":
            stopped = self._service.stop_spawned_from(channel)
            return "Stopping every running sub-agent." if stopped else "No sub-agent is running."
        spawn = find_spawn(self._service.spawns(channel, archived=True), args[0])
        run = self._service.current_run(spawn)
        if not self._service.is_active(spawn):
            return f"#{spawn.seq} is not running ({status_of(run)})."
        self._service.lifecycle.stop(run)
        return f"Stopping #{spawn.seq}."

    def _log(self, channel: str, args: list[str]) -> str:
        if not args:
            return "Usage: /subagents log <id|#> [limit] [tools]"
        spawn = find_spawn(self._service.spawns(channel, archived=True), args[0])
        rest = " ".join(args[1:]).split()
        tools = "tools" in (w.lower() for w in rest)
        numbers = [w for w in rest if _NUMBER.fullmatch(w)]
        limit = min(int(numbers[0]), MAX_LOG_LIMIT) if numbers else DEFAULT_LOG_LIMIT
        entries = transcript_lines(self._service.engine.sessions, spawn, max(limit, 1), tools)
        if not entries:
            return f"#{spawn.seq} has no transcript yet."
        lines = [f"Log of #{spawn.seq} (last {len(entries)}):"]
        for entry in entries:
            if entry["role"] == "tool":
                detail = entry.get("args") or entry.get("result") or ""
                lines.append(f"[tool {entry['name']}] {detail}")
            else:
                lines.append(f"[{entry['role']}] {entry['text']}")
        return "\n".join(lines)

    def _info(self, channel: str, args: list[str]) -> str:
        if not args:
            return "Usage: /subagents info <id|#>"
        spawn = find_spawn(self._service.spawns(channel, archived=True), args[0])
        run = self._service.current_run(spawn)
        transcript = self._service.engine.sessions.log_path(spawn.child_channel)
        return "\n".join(
            [
                f"Sub-agent #{spawn.seq}" + (f' "{spawn.label}"' if spawn.label else ""),
                f"Status: {status_of(run)}" + (" (archived)" if spawn.archived else ""),
                f"Agent: {spawn.agent_id} · model {spawn.model or '(the default)'}",
                f"Created: {_when(spawn.created)}",
                f"Started: {_when(run.started)}",
                f"Ended: {_when(run.ended)}",
                f"Runtime: {_runtime(run)}",
                f"Run id: {run.run_id}",
                f"Session key: {spawn.session_key}",
                f"Session id: {spawn.child_channel}",
                f"Transcript: {transcript}",
                f"Cleanup: {spawn.cleanup}",
            ]
            + ([f"Notes: {run.notes}"] if run.notes else [])
        )

    def _send(self, channel: str, args: list[str]) -> str:
        if len(args) < 2 or not args[1].strip():
            return "Usage: /subagents send <id|#> <message>"
        spawn = find_spawn(self._service.spawns(channel, archived=True), args[0])
        self._service.send(channel, spawn, args[1].strip(), announce=True)
        return f"Sent to #{spawn.seq}; its reply will be posted here."

    @staticmethod
    def _line(run: RunRecord, spawn: RunRecord) -> str:
        label = f' "{spawn.label}"' if spawn.label else ""
        return (
            f"#{spawn.seq}{label} · {spawn.agent_id} · {status_of(run)} · {_runtime(run)} · "
            f"{spawn.session_key}"
        )


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def _runtime(run: RunRecord) -> str:
    seconds = runtime_seconds(run)
    return "-" if seconds is None else format_runtime(seconds)

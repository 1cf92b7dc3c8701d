"""A sub-agent run's life after it is accepted: started, ended (done, failed, stopped, timed
out), the announce step, and the announce written to the outbox. Also what a restart finds: runs
the previous process never finished are announced as interrupted, never dropped.

Every transition is written to the store before anything depends on it; see :mod:`.store`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from iris_runtime.engine.agent import AgentSetup
from iris_runtime.engine.core import Engine
from iris_runtime.engine.provider import Usage
from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.transport import ChannelTransport, TransportEvent
from iris_runtime.engine.usage import usage_from_json, usage_to_json
from iris_runtime.errors import IrisError
from iris_runtime.failpoints import failpoint
from iris_runtime.session_agents.announce import ANNOUNCE_PROMPT, AnnounceFacts, is_skip, render
from iris_runtime.session_agents.events import subagent_event
from iris_runtime.session_agents.store import Announce, RunRecord, SubagentStore

log = logging.getLogger(__name__)

RESULT_FALLBACK_CHARS = 2000
RESTART_NOTE = "Iris restarted while this sub-agent was running, so it did not finish"
ANNOUNCE_RESTART_NOTE = "Iris restarted during the announce step, so no summary was written"
LAST_REPLY_NOTE = "the result is the sub-agent's last reply (no summary was written)"


@dataclass
class RunLive:
    """What only this process knows about a run in flight."""

    setup: AgentSetup
    announce: bool = True  # False for sessions_send: the caller gets the reply instead
    phase: str = "task"  # task | announce
    timer: threading.Timer | None = None
    timed_out: bool = False
    stopped: bool = False
    task_result: RunResult | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def wait(self, timeout: float, abort: threading.Event) -> RunResult | None:
        """The task run's result, or None when ``timeout`` passed or ``abort`` was set."""
        deadline = time.monotonic() + timeout
        while not self.done.wait(0.05):
            if abort.is_set() or time.monotonic() >= deadline:
                return None
        return self.task_result


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """A run callback whose failure (state.db busy or full) is logged, not swallowed unseen
    by the ticket; the run is then settled by the next start's recovery."""

    def call(self: Lifecycle, *args: Any) -> None:
        try:
            method(self, *args)
        except Exception:
            log.exception("sub-agent bookkeeping failed in %s", method.__name__)

    return call


class Lifecycle:
    def __init__(
        self,
        engine: Engine,
        store: SubagentStore,
        transport: ChannelTransport,
        *,
        archive_minutes: Callable[[], float],
        priced: Callable[[str], bool],
        announced: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._store = store
        self._transport = transport
        self._archive_minutes = archive_minutes
        self._priced = priced
        self._announced = announced  # wakes the delivery and the archiver
        self._live: dict[str, RunLive] = {}  # run id -> its live state
        self._by_channel: dict[str, str] = {}  # child channel -> run id running there
        self._lock = threading.Lock()
        # Held while a session's run is launched, and while it is archived: neither can
        # happen halfway through the other.
        self.session_lock = threading.RLock()

    # -- starting -------------------------------------------------------------------------

    def launch(self, record: RunRecord, setup: AgentSetup, *, announce: bool = True) -> RunLive:
        """Queue the child run of ``record`` (already in the store) on lane ``subagent``;
        without ``announce`` its reply goes only to whoever waits on the returned handle."""
        live = RunLive(setup, announce)
        with self.session_lock, self._lock:
            self._live[record.run_id] = live
            self._by_channel[record.child_channel] = record.run_id
        event = TransportEvent(channel=record.child_channel, text=record.task, user="iris")
        try:
            ticket = self._engine.submit(self._transport, event, lane="subagent", setup=setup)
        except IrisError as exc:
            self._forget(record)
            self.finish(record.run_id, "error", [f"could not start: {exc}"], Usage(), None)
            live.done.set()
            return live
        ticket.add_done_callback(lambda result: self._task_ended(record.run_id, result))
        return live

    @_guarded
    def started(self, channel: str) -> None:
        """A run began on a child channel (the transport's hook); its timeout starts now, not
        while it waited for a lane slot."""
        with self._lock:
            run_id = self._by_channel.get(channel)
            live = self._live.get(run_id) if run_id else None
        if run_id is None or live is None or live.phase != "task":
            return
        self._store.update_run(run_id, state="running", started=time.time())
        failpoint("subagents.child_running")
        record = self._store.run(run_id)
        if record is None:
            return
        if record.timeout_seconds > 0:
            live.timer = threading.Timer(record.timeout_seconds, self._time_out, (record,))
            live.timer.daemon = True
            live.timer.start()
        self._notify(record, "started")

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, record: RunRecord) -> bool:
        """Abort the run of ``record``; whether it was in flight here."""
        with self._lock:
            live = self._live.get(record.run_id)
            if live is not None:
                live.stopped = True
        if live is None:
            return False
        self._engine.handle_stop(record.child_channel)
        return True

    def running_in(self, channel: str) -> str | None:
        with self._lock:
            return self._by_channel.get(channel)

    def _time_out(self, record: RunRecord) -> None:
        with self._lock:
            live = self._live.get(record.run_id)
            if live is None or live.phase != "task":
                return
            live.timed_out = True
        log.info("sub-agent run %s timed out after %ss", record.run_id, record.timeout_seconds)
        self._engine.handle_stop(record.child_channel)

    # -- ending -----------------------------------------------------------------------------

    @_guarded
    def _task_ended(self, run_id: str, result: RunResult) -> None:
        with self._lock:
            live = self._live.get(run_id)
            if live is None:
                return
            status, notes = _outcome(result, live)
            go_on = live.announce and status == "success"
            if go_on:
                live.phase, live.task_result = "announce", result  # a late timer is ignored
        if live.timer is not None:
            live.timer.cancel()
        record = self._store.run(run_id)
        if record is None:
            return
        if not go_on:
            self._forget(record)
            live.task_result = result
            self.finish(run_id, status, notes, result.usage, None, skip=not live.announce)
            live.done.set()
            return
        self._store.update_run(run_id, state="announcing", usage=_usage_text(result.usage))
        event = TransportEvent(channel=record.child_channel, text=ANNOUNCE_PROMPT, user="iris")
        try:
            ticket = self._engine.submit(self._transport, event, lane="subagent", setup=live.setup)
        except IrisError as exc:
            self._forget(record)
            note = f"no announce step: {exc}"
            self.finish(run_id, "success", [note], result.usage, None, task_text=result.text)
            return
        ticket.add_done_callback(lambda step: self._announce_ended(record, result, step))

    @_guarded
    def _announce_ended(self, record: RunRecord, task: RunResult, step: RunResult) -> None:
        self._forget(record)
        usage = task.usage + step.usage
        if step.status == "done" and is_skip(step.text):
            self.finish(record.run_id, "success", [], usage, None, skip=True)
            return
        notes = [] if step.status == "done" else [f"the announce step ended: {_why(step)}"]
        summary = step.text if step.status == "done" else None
        self.finish(record.run_id, "success", notes, usage, summary, task_text=task.text)

    def finish(
        self,
        run_id: str,
        status: str,
        notes: list[str],
        usage: Usage,
        summary: str | None,
        *,
        skip: bool = False,
        task_text: str = "",
    ) -> None:
        """Write the end of the run and its announce (one transaction), then wake delivery."""
        record = self._store.run(run_id)
        if record is None or record.state == "ended":
            return
        now = time.time()
        if summary is None and task_text.strip():
            summary = task_text.strip()[:RESULT_FALLBACK_CHARS]
            notes = [*notes, LAST_REPLY_NOTE]
        ended = replace(record, ended=now, state="ended")
        text = render(self._facts(ended, status, summary, notes, usage))
        usage_text = _usage_text(usage)
        announce = Announce(
            run_id,
            record.origin_channel,
            record.origin_transport,
            record.origin_thread,
            record.origin_run,
            f"subagent:{record.agent_id}",
            text,
            usage_text,
            "skipped" if skip else "pending",
            0,
            now,
            None,
        )
        self._store.end_run(
            run_id, announce, outcome=status, notes="; ".join(notes), usage=usage_text, ended=now
        )
        self.schedule_archive(record, now, delivered=skip)
        failpoint("subagents.announce_recorded")
        self._notify(self._store.run(run_id) or ended, "finished")
        self._announced()

    def _facts(
        self,
        record: RunRecord,
        status: str,
        summary: str | None,
        notes: list[str],
        usage: Usage,
    ) -> AnnounceFacts:
        began = record.started or record.created
        return AnnounceFacts(
            seq=record.seq,
            label=record.label,
            agent_id=record.agent_id,
            status=status,
            result=summary,
            notes=notes,
            runtime_seconds=(record.ended or time.time()) - began,
            usage=usage,
            priced=bool(record.model) and self._priced(record.model),
            session_key=record.session_key,
            session_id=record.child_channel,
            transcript=self._engine.sessions.log_path(record.child_channel),
        )

    def schedule_archive(self, record: RunRecord, now: float, *, delivered: bool) -> None:
        """Set the session's archive time: ``archiveAfterMinutes`` after its last run ended,
        or, with ``cleanup: delete``, once the announce is delivered (or skipped)."""
        spawn = self._store.spawn_of(record.session_key)
        if spawn is None or spawn.archived is not None:
            return
        minutes = self._archive_minutes()
        if spawn.cleanup == "delete":
            if delivered:
                self._store.update_run(spawn.run_id, archive_at=now)
        elif minutes > 0:
            self._store.update_run(spawn.run_id, archive_at=now + minutes * 60)

    def _notify(self, run: RunRecord, phase: str) -> None:
        spawn = self._store.spawn_of(run.session_key) or run
        self._engine.notify(run.origin_channel, subagent_event(spawn, run, phase))

    def _forget(self, record: RunRecord) -> None:
        with self._lock:
            self._live.pop(record.run_id, None)
            if self._by_channel.get(record.child_channel) == record.run_id:
                del self._by_channel[record.child_channel]

    # -- after a restart --------------------------------------------------------------------

    def recover(self) -> int:
        """Announce every run the previous process left unfinished; how many there were."""
        unfinished = self._store.unfinished()
        for record in unfinished:
            usage = usage_from_json(record.usage_json)
            skip = record.kind == "send"  # its caller's turn died with the process
            if record.state == "announcing":
                last = self._last_reply(record)
                notes = [ANNOUNCE_RESTART_NOTE]
                self.finish(record.run_id, "success", notes, usage, None, task_text=last, skip=skip)
            else:
                self.finish(record.run_id, "error", [RESTART_NOTE], usage, None, skip=skip)
        if unfinished:
            log.warning("announcing %d sub-agent run(s) a restart interrupted", len(unfinished))
        return len(unfinished)

    def _last_reply(self, record: RunRecord) -> str:
        entries = self._engine.sessions.entries(record.child_channel)
        replies = [
            e["text"]
            for e in entries
            if e.get("role") == "assistant" and isinstance(e.get("text"), str)
        ]
        return replies[-1] if replies else ""


def _outcome(result: RunResult, live: RunLive) -> tuple[str, list[str]]:
    """The run's Status from what the runtime saw, and the notes that explain it."""
    if live.timed_out:
        return "timeout", ["stopped after runTimeoutSeconds"]
    if result.status == "done":
        return "success", []
    if result.status == "stopped" and result.error_code == "shutting_down":
        return "error", ["Iris shut down during this run"]
    if result.status == "stopped" or live.stopped:
        return "error", ["stopped by a stop request (/stop or /subagents stop)"]
    if result.status in {"failed", "max_turns", "cancelled"}:
        return "error", [_why(result)]
    return "unknown", [f"the run ended with status {result.status!r}"]


def _why(result: RunResult) -> str:
    return result.error or result.status


def _usage_text(usage: Usage) -> str:
    return json.dumps(usage_to_json(usage))

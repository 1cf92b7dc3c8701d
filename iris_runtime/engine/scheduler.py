"""The run scheduler: one run at a time per channel, five waiting, each run on its lane.

Whatever happens — a finish, a crash, a stop before the run started, a shutdown at any moment —
every accepted run's ticket resolves exactly once, and the channel's next waiting run starts (or,
while shutting down, is cancelled). What a run *does* is the engine's business: the scheduler
only calls ``execute(run, slot)`` on a lane thread and ``never_ran(run, reason)`` for a run that
will not run (``"stopped"`` or ``"shutdown"``), which logs it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from iris_runtime.engine.agent import AgentSetup
from iris_runtime.engine.lanes import Lanes, LaneSlot, QueuedWork
from iris_runtime.engine.runs import RunResult, RunTicket
from iris_runtime.engine.transport import TransportEvent
from iris_runtime.errors import EngineStopping, QueueFull

log = logging.getLogger(__name__)

MAX_WAITING_PER_CHANNEL = 5


@dataclass
class Run:
    """One accepted message on its way: queued on its channel, then run on its lane."""

    run_id: str
    channel: str
    transport_id: str
    event: TransportEvent
    is_event: bool
    lane: str
    ticket: RunTicket
    abort: threading.Event = field(default_factory=threading.Event)
    queued: QueuedWork | None = None  # its place on a lane until it starts
    setup: AgentSetup | None = None  # its own agent (a sub-agent's), else Iris's


@dataclass
class _ChannelSlot:
    running: Run | None = None
    waiting: deque[Run] = field(default_factory=deque)


class RunScheduler:
    def __init__(
        self,
        lanes: Lanes,
        execute: Callable[[Run, LaneSlot], RunResult],
        never_ran: Callable[[Run, str], None],
    ) -> None:
        self._lanes = lanes
        self._execute = execute
        self._never_ran = never_ran
        self._slots: dict[str, _ChannelSlot] = {}
        self._lock = threading.Lock()
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    def submit(self, run: Run) -> None:
        """Start ``run`` or queue it behind its channel's; QueueFull when five already wait."""
        with self._lock:
            if self._stopping:
                raise EngineStopping("Iris is shutting down; try again after it restarts")
            slot = self._slots.setdefault(run.channel, _ChannelSlot())
            if slot.running is None:
                slot.running = run
            elif len(slot.waiting) >= MAX_WAITING_PER_CHANNEL:
                log.warning(
                    "queue of %s is full (%d waiting); refusing a message",
                    run.channel,
                    MAX_WAITING_PER_CHANNEL,
                )
                raise QueueFull(
                    f"channel {run.channel!r} has a run in progress and "
                    f"{MAX_WAITING_PER_CHANNEL} messages waiting; try again when it finishes"
                )
            else:
                slot.waiting.append(run)
                return
        self._start(run)

    def running_run(self, channel: str) -> str | None:
        """The id of the channel's running run, if any."""
        with self._lock:
            slot = self._slots.get(channel)
            return slot.running.run_id if slot and slot.running else None

    def is_running(self, channel: str) -> bool:
        with self._lock:
            slot = self._slots.get(channel)
            return bool(slot and slot.running)

    def stop(self, channel: str) -> bool:
        """Abort the channel's running run; one still queued for its lane ends at once.
        Returns whether a run was running."""
        with self._lock:
            slot = self._slots.get(channel)
            run = slot.running if slot else None
        if run is None:
            return False
        log.info("stopping run %s on %s", run.run_id, channel)
        run.abort.set()
        self._lanes.wake()  # a run waiting to take its slot back sees the stop
        if run.queued is not None and run.queued.withdraw():
            self._conclude(run, self._unstarted(run))
        return True

    def begin_shutdown(self) -> bool:
        """Refuse new work, abort running runs, cancel waiting and queued ones. False if a
        shutdown had already begun."""
        with self._lock:
            if self._stopping:
                return False
            self._stopping = True
            running = [s.running for s in self._slots.values() if s.running]
            waiting = [r for s in self._slots.values() for r in s.waiting]
            for slot in self._slots.values():
                slot.waiting.clear()
        for run in running:
            run.abort.set()
        for run in waiting:
            self._cancel(run)
        self._lanes.close()  # cancels, through their ``dropped``, the runs queued for a lane
        self._lanes.wake()
        return True

    def join(self, timeout: float) -> bool:
        return self._lanes.join(timeout)

    # -- one run's life -------------------------------------------------------------------------

    def _start(self, run: Run) -> None:
        # The run knows its place before it can be queued, so a stop always finds it.
        run.queued = self._lanes.prepare(
            run.lane, lambda slot: self._on_lane(run, slot), dropped=lambda: self._cancel(run)
        )
        try:
            run.queued.submit()
        except EngineStopping:
            self._cancel(run)

    def _on_lane(self, run: Run, slot: LaneSlot) -> None:
        result: RunResult | None = None
        try:
            if not run.abort.is_set():
                result = self._execute(run, slot)
            elif self._stopping:
                self._cancel(run)  # aborted by the shutdown before it began
            else:
                result = self._unstarted(run)  # stopped between being queued and starting
        except Exception as exc:  # the engine handles its own; this keeps the ticket honest
            log.exception("run %s on %s crashed", run.run_id, run.channel)
            result = RunResult(
                run.run_id, "failed", f"(run failed: {exc})", str(exc), "run_crashed"
            )
        finally:
            self._conclude(run, result)

    def _unstarted(self, run: Run) -> RunResult:
        self._quietly(self._never_ran, run, "stopped")
        return RunResult(run.run_id, "stopped", "")

    def _cancel(self, run: Run) -> None:
        self._quietly(self._never_ran, run, "shutdown")
        run.ticket.resolve(
            RunResult(
                run.run_id,
                "cancelled",
                "",
                "Iris shut down before this message ran",
                "shutting_down",
            )
        )
        self._finish(run)

    def _conclude(self, run: Run, result: RunResult | None) -> None:
        """Free the channel for its next run, then answer this one's waiter (always both)."""
        try:
            self._finish(run)
        finally:
            if result is not None:
                if result.status == "stopped" and self._stopping:
                    # Not a user's stop: say so, so callers (a bridge client) can tell.
                    result = replace(
                        result, error="Iris shut down during this run", error_code="shutting_down"
                    )
                run.ticket.resolve(result)

    def _finish(self, run: Run) -> None:
        with self._lock:
            slot = self._slots.get(run.channel)
            if slot is None or slot.running is not run:
                return  # a waiting run cancelled at shutdown: the channel was not its
            following = slot.waiting.popleft() if slot.waiting and not self._stopping else None
            slot.running = following
            if following is None and not slot.waiting:
                del self._slots[run.channel]
        if following is not None:
            self._start(following)

    @staticmethod
    def _quietly(call: Callable[[Run, str], None], run: Run, reason: str) -> None:
        try:
            call(run, reason)
        except Exception:
            log.exception("could not record that run %s never ran", run.run_id)

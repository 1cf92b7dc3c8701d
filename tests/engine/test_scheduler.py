"""The scheduler on its own: every accepted run's ticket resolves exactly once — a stop before it
started, a shutdown while it waits for a lane, a lane closed under a starting run — and the
channel's next run starts after each."""

from __future__ import annotations

import threading

from iris_runtime.engine.lanes import Lanes, LaneSlot
from iris_runtime.engine.runs import RunResult, RunTicket
from iris_runtime.engine.scheduler import Run, RunScheduler
from iris_runtime.engine.transport import TransportEvent


def make_run(channel: str, text: str = "hi") -> Run:
    run_id = f"{channel}-{text}"
    return Run(
        run_id,
        channel,
        "rec",
        TransportEvent(channel, text),
        False,
        "main",
        RunTicket(run_id, channel),
    )


class Harness:
    """A scheduler whose runs block until released (or aborted), recording what happened."""

    def __init__(self, width: int = 1) -> None:
        self.lanes = Lanes({"main": width})
        self.never_ran: list[tuple[str, str]] = []
        self.started: list[str] = []
        self.release = threading.Event()
        self.scheduler = RunScheduler(self.lanes, self.execute, self.record)

    def execute(self, run: Run, slot: LaneSlot) -> RunResult:
        self.started.append(run.run_id)
        while not self.release.is_set() and not run.abort.is_set():
            self.release.wait(0.01)
        status = "stopped" if run.abort.is_set() else "done"
        return RunResult(run.run_id, status, "said something")

    def record(self, run: Run, reason: str) -> None:
        self.never_ran.append((run.run_id, reason))


def test_a_stop_ends_a_run_queued_for_its_lane_and_its_channel_goes_on() -> None:
    h = Harness(width=1)
    busy, queued, after = make_run("a"), make_run("b"), make_run("b", "later")
    for run in (busy, queued, after):
        h.scheduler.submit(run)
    assert h.scheduler.stop("b")
    assert queued.ticket.wait(2).status == "stopped"
    assert h.never_ran == [("b-hi", "stopped")]
    h.release.set()
    assert busy.ticket.wait(5).status == "done"
    assert after.ticket.wait(5).status == "done"  # the channel's next message still ran
    assert h.started == ["a-hi", "b-later"]


def test_a_shutdown_cancels_queued_and_waiting_runs_and_stops_the_running_one() -> None:
    h = Harness(width=1)
    running, queued, waiting = make_run("a"), make_run("b"), make_run("a", "next")
    for run in (running, queued, waiting):
        h.scheduler.submit(run)
    threading.Event().wait(0.1)
    assert h.scheduler.begin_shutdown() and not h.scheduler.begin_shutdown()
    assert queued.ticket.wait(2).status == "cancelled"
    assert waiting.ticket.wait(2).status == "cancelled"
    stopped = running.ticket.wait(5)
    assert (stopped.status, stopped.error_code) == ("stopped", "shutting_down")
    assert sorted(h.never_ran) == [("a-next", "shutdown"), ("b-hi", "shutdown")]
    assert h.scheduler.join(5)
    assert h.started == ["a-hi"]


def test_a_run_started_after_the_lanes_closed_is_cancelled_not_lost() -> None:
    # The window where a finishing run hands its channel on just as the shutdown closes lanes.
    h = Harness(width=1)
    h.lanes.close()
    late = make_run("c")
    h.scheduler.submit(late)
    assert late.ticket.wait(2).status == "cancelled"
    assert h.never_ran == [("c-hi", "shutdown")]
    assert not h.scheduler.is_running("c")


def test_a_crash_in_execute_still_answers_and_frees_the_channel() -> None:
    lanes = Lanes({"main": 1})

    def explode(run: Run, slot: LaneSlot) -> RunResult:
        raise RuntimeError("bug")

    scheduler = RunScheduler(lanes, explode, lambda run, reason: None)
    first, second = make_run("d"), make_run("d", "again")
    scheduler.submit(first)
    scheduler.submit(second)
    assert first.ticket.wait(2).error_code == "run_crashed"
    assert second.ticket.wait(2).error_code == "run_crashed"
    assert not scheduler.is_running("d")

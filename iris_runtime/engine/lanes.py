"""Lanes: named compute budgets that runs execute under (``main``, ``subagent``, ``events``).

A lane's width bounds how many runs of that kind *compute* at once across all channels; the
one-run-per-channel rule is the scheduler's job (see :mod:`iris_runtime.engine.core`). A run that
waits on something remote (a sub-agent's reply, possibly for hours) steps off its lane for the
wait (:meth:`LaneSlot.off_lane`), so four long delegations cannot starve every other channel.

A run waiting for a slot holds no thread: it is queued work, handed to a lane thread when a slot
frees, and a queued run can be withdrawn (a stop, a shutdown) before it ever starts. A run
coming back from a remote wait goes ahead of queued ones: it is already part-way through.

Lane threads are kept for ``IDLE_SECONDS`` after their work ends and reused: starting a thread
per run cost a tenth of a millisecond and a hand-shake with the new thread on every message.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from iris_runtime.errors import EngineStopping

log = logging.getLogger(__name__)

DEFAULT_LANE = "main"
IDLE_SECONDS = 60.0  # how long a lane thread without work waits for more before it ends


class LaneSlot:
    """A run's hold on one slot of its lane, handed to the work when it starts."""

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._held = True

    @contextlib.contextmanager
    def off_lane(self, abort: threading.Event | None = None) -> Iterator[None]:
        """Give the slot back for the duration of a remote wait; take one again afterwards.

        If ``abort`` is set while waiting for the slot again, the run carries on without one:
        it is finishing a stopped run, which costs next to nothing."""
        if not self._held:
            yield
            return
        self._held = False
        self._lane.release()
        try:
            yield
        finally:
            self._held = self._lane.reacquire(abort)

    def release(self) -> None:
        if self._held:
            self._held = False
            self._lane.release()


class QueuedWork:
    """Work for a lane: :meth:`submit` queues it, :meth:`withdraw` takes it back if it has not
    started. ``dropped`` is called if the lane shuts down before it started."""

    def __init__(
        self, lane: Lane, work: Callable[[LaneSlot], None], dropped: Callable[[], None]
    ) -> None:
        self._lane = lane
        self.work = work
        self.dropped = dropped

    def submit(self) -> None:
        """Queue it (it starts as soon as a slot is free); EngineStopping once shut down."""
        self._lane.submit(self)

    def withdraw(self) -> bool:
        return self._lane.withdraw(self)


class Lane:
    def __init__(self, name: str, width: int) -> None:
        self.name = name
        self.width = width
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)  # idle lane threads wait here
        self._ready: deque[QueuedWork] = deque()  # admitted, not yet picked up by a thread
        self._idle = 0  # lane threads waiting for work
        self._running = 0  # lane threads doing work
        self._active = 0
        self._returning = 0  # runs back from a remote wait, waiting for a slot
        self._granted = 0  # slots handed to returning runs that have not taken them yet
        self._queue: deque[QueuedWork] = deque()
        self._closed = False

    def submit(self, item: QueuedWork) -> None:
        with self._cond:
            if self._closed:
                raise EngineStopping("Iris is shutting down; try again after it restarts")
            self._queue.append(item)
            self._admit()

    def withdraw(self, item: QueuedWork) -> bool:
        with self._cond:
            try:
                self._queue.remove(item)
            except ValueError:
                return False
            return True

    def release(self) -> None:
        with self._cond:
            self._active -= 1
            self._admit()

    def reacquire(self, abort: threading.Event | None) -> bool:
        with self._cond:
            if self._active < self.width and not self._returning:
                self._active += 1
                return True
            self._returning += 1
            while not self._granted and not (abort and abort.is_set()) and not self._closed:
                self._cond.wait()
            self._returning -= 1
            if self._granted:
                self._granted -= 1
                return True
            return False

    def wake(self) -> None:
        """Let waiters re-check their abort flags."""
        with self._cond:
            self._cond.notify_all()

    def _admit(self) -> None:
        """Fill free slots: returning runs first, then queued work in order. Holds the lock."""
        while self._active < self.width:
            if self._returning > self._granted:
                self._active += 1
                self._granted += 1
                self._cond.notify_all()
            elif self._queue:
                self._active += 1
                self._start(self._queue.popleft())
            else:
                return

    def _start(self, item: QueuedWork) -> None:
        """Hand admitted work to an idle lane thread, or a new one. Holds the lock."""
        self._ready.append(item)
        if len(self._ready) <= self._idle:
            self._work.notify()
            return
        threading.Thread(target=self._serve, name=f"iris-lane-{self.name}", daemon=True).start()

    def _serve(self) -> None:
        """A lane thread: do admitted work, then wait a while for more."""
        item = self._next(wait=False)
        while item is not None:
            try:
                self._execute(item)
            except BaseException:  # SystemExit from a plugin: count this thread out, then go
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()
                raise
            item = self._next(wait=True)

    def _next(self, *, wait: bool) -> QueuedWork | None:
        with self._cond:
            if wait:
                self._running -= 1
                self._cond.notify_all()  # join() waits for running work to end
            deadline = time.monotonic() + IDLE_SECONDS
            while not self._ready:
                left = deadline - time.monotonic()
                if not wait or self._closed or left <= 0:
                    return None
                self._idle += 1
                self._work.wait(left)
                self._idle -= 1
            self._running += 1
            return self._ready.popleft()

    def _execute(self, item: QueuedWork) -> None:
        slot = LaneSlot(self)
        try:
            item.work(slot)
        except Exception:  # the engine catches its own; this is a last line of defence
            log.exception("work on lane %s crashed", self.name)
        finally:
            slot.release()

    def close(self) -> None:
        """Accept nothing more; work that never started is dropped (its ``dropped`` runs)."""
        with self._cond:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            self._work.notify_all()  # idle lane threads end
        for item in pending:
            try:
                item.dropped()
            except Exception:
                log.exception("dropping work on lane %s failed", self.name)

    def join(self, deadline: float) -> bool:
        """Wait until no work runs or waits for a thread (idle threads do not count)."""
        with self._cond:
            while self._running or self._ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True


class Lanes:
    def __init__(self, widths: dict[str, int]) -> None:
        self._lanes = {name: Lane(name, width) for name, width in widths.items()}
        self.widths = dict(widths)

    def prepare(
        self,
        lane: str,
        work: Callable[[LaneSlot], None],
        dropped: Callable[[], None] = lambda: None,
    ) -> QueuedWork:
        """Work for ``lane``, not queued yet: the caller can keep a handle before it runs."""
        chosen = self._lanes.get(lane)
        if chosen is None:
            raise ValueError(f"unknown lane {lane!r}; lanes are {', '.join(self._lanes)}")
        return QueuedWork(chosen, work, dropped)

    def submit(self, lane: str, work: Callable[[LaneSlot], None]) -> QueuedWork:
        item = self.prepare(lane, work)
        item.submit()
        return item

    def wake(self) -> None:
        for lane in self._lanes.values():
            lane.wake()

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()

    def join(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(lane.join(deadline) for lane in self._lanes.values())

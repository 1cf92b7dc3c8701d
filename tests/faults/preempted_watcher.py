"""A watcher preempted between reading an event file and reporting it, made to happen on purpose.

On a loaded machine the watcher thread can lose the CPU right after it has read an event file
and before it reports it to the event service, while the firing thread goes on. At start-up that
firing thread may be delivering that very file again (its previous run was lost in a crash) and
remove it once its channel has taken it. This module makes that interleaving exact in a served
Iris, for one event file: the test puts a ``sitecustomize`` that calls :func:`install` on the
served process's ``PYTHONPATH`` and names the file in ``IRIS_TEST_PREEMPTED_EVENT``. Then the
watcher's report of that file waits until the firing thread has decided what to do with the file
after delivering it (:meth:`EventService._consume`), and that decision waits until the watcher
has read the file. Both threads then call the real methods: only the order is imposed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

VARIABLE = "IRIS_TEST_PREEMPTED_EVENT"
# Written in the data dir once the imposed order has happened, so a test knows it did.
MARKER = "preempted-watcher.done"
# Only bounds a hang (a product change that never removes the file, say).
HANG_SECONDS = 120.0


def sitecustomize(folder: Path, repo: Path) -> dict[str, str]:
    """Write a ``sitecustomize`` into ``folder``; the environment that makes a served Iris load
    it (add ``VARIABLE`` to choose the file)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "from tests.faults.preempted_watcher import install\n\ninstall()\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(repo)])}


def install() -> None:
    target = os.environ.get(VARIABLE)
    if not target:
        return
    from iris_runtime.events.service import EventService

    read, decided = threading.Event(), threading.Event()
    real_on_event, real_consume = EventService.on_event, EventService._consume

    def on_event(self: EventService, rel: str, *args: Any) -> str | None:
        if rel == target and not read.is_set():
            read.set()  # it has been read: the watcher reads a file before it reports it
            decided.wait(HANG_SECONDS)
            (self.data_dir / MARKER).touch()
        result: str | None = real_on_event(self, rel, *args)
        return result

    def consume(self: EventService, firing: Any) -> bool:
        if firing.event != target or decided.is_set():
            return bool(real_consume(self, firing))
        read.wait(HANG_SECONDS)
        try:
            return bool(real_consume(self, firing))
        finally:
            decided.set()

    EventService.on_event = on_event  # type: ignore[method-assign]
    EventService._consume = consume  # type: ignore[method-assign]

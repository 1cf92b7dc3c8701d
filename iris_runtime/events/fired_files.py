"""What becomes of an event file once its firing is settled: removed after it ran, or left in
place with its reason written next to it when its channel kept refusing it.

Only the version of the file that fired is ever touched: a file edited meanwhile is a new
event and stays (see :func:`~iris_runtime.events.consume.consume`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from iris_runtime.events.consume import consume
from iris_runtime.events.files import Folder, digest, folder_problem, read_bounded, write_reason
from iris_runtime.events.state import Firing

log = logging.getLogger(__name__)


class FiredFiles:
    """The event files under ``data_dir`` seen from the firings that came from them."""

    def __init__(self, data_dir: Path, remove_file: Callable[[Path], None] = os.remove) -> None:
        self.data_dir = data_dir
        self._remove_file = remove_file

    def holds(self, firing: Firing) -> bool:
        """Whether the firing's file still holds the version that fired."""
        try:
            return digest(read_bounded(self.data_dir / firing.event)) == firing.digest
        except OSError:
            return False

    def remove(self, firing: Firing, why: str) -> bool:
        """Remove the version of the file that fired, never another; True unless that failed."""
        if folder_problem(self.data_dir, _folder_of(firing.event)) is not None:
            log.error(
                "events: %s ran, but its folder is not usable; it is left alone", firing.event
            )
            return False
        try:
            outcome = consume(self.data_dir / firing.event, firing.digest, unlink=self._remove_file)
        except OSError as exc:
            # It stays accepted: the next start removes the file without running it again.
            log.error("events: %s (%s) could not be removed: %s", firing.event, why, exc)
            return False
        if outcome == "newer":
            log.info("events: %s changed after it fired; the new version stays", firing.event)
        return True

    def reject(self, firing: Firing, reason: str) -> None:
        """Leave the file, its reason written next to it (edit or touch it to retry)."""
        path = self.data_dir / firing.event
        log.error(
            "events: gave up on %s: %s (reason in %s.error; edit or touch the file to retry)",
            firing.event,
            reason,
            firing.event,
        )
        try:
            if digest(read_bounded(path)) == firing.digest:
                write_reason(path, f"could not be delivered: {reason}")
        except OSError as exc:
            log.error("events: cannot write the reason for %s: %s", firing.event, exc)


def _folder_of(rel: str) -> Folder:
    return Folder(rel.rsplit("/", 1)[0])

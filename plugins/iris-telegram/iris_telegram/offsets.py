"""The ``getUpdates`` offset, persisted so a restart neither replays nor loses updates.

One small JSON file per bot (``telegram/offset-<bot id>.json`` in the data dir: a new token for
another bot starts clean), private, replaced atomically.

Telegram forgets an update as soon as a poll asks for a higher offset, so it cannot deliver a
message again once it was polled past. An update is *settled* once nothing is left to do for it
(its run started, it was refused or ignored). A message still waiting behind another run is not
settled: if Iris stops first, the engine cancels it. Those updates are kept in the file as they
came (:class:`UpdateLedger`) and handed over again, in order and before anything new, after the
restart: nothing waiting is lost, and nothing that ran is run twice.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from iris_runtime import data_layout
from iris_runtime.private_files import private_dir, write_private_file

log = logging.getLogger(__name__)


class OffsetStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_bot(cls, data_dir: Path, bot_id: str) -> OffsetStore:
        return cls(data_dir / data_layout.TELEGRAM_DIR / f"offset-{bot_id}.json")

    def load(self) -> int | None:
        return self.load_state()[0]

    def load_state(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The offset and the unsettled updates kept with it."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, []
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable Telegram offset file %s: %s", self.path, exc)
            return None, []
        offset = raw.get("offset") if isinstance(raw, dict) else None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            log.warning("ignoring the Telegram offset file %s: no valid offset in it", self.path)
            return None, []
        kept = raw.get("unsettled")
        updates = [
            u
            for u in (kept if isinstance(kept, list) else [])
            if isinstance(u, dict) and isinstance(u.get("update_id"), int)
        ]
        return offset, updates

    def save(self, offset: int, unsettled: list[dict[str, Any]] | None = None) -> None:
        private_dir(self.path.parent)
        state: dict[str, Any] = {"offset": offset}
        if unsettled:
            state["unsettled"] = unsettled
        write_private_file(self.path, json.dumps(state).encode())


class UpdateLedger:
    """The updates handed over but not settled yet, and the offset to poll from. Thread-safe:
    updates are handed over on the poller thread and settle on run threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unsettled: dict[int, dict[str, Any]] = {}
        self._next: int | None = None  # one past the highest update handed over

    def restore(self, offset: int | None, unsettled: list[dict[str, Any]]) -> None:
        with self._lock:
            self._next = offset
            self._unsettled = {u["update_id"]: u for u in unsettled}

    def begin(self, update: dict[str, Any]) -> None:
        with self._lock:
            update_id = int(update["update_id"])
            self._unsettled[update_id] = update
            self._next = max(self._next or 0, update_id + 1)

    def settle(self, update_id: int) -> None:
        with self._lock:
            self._unsettled.pop(update_id, None)

    def state(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The offset to save and the unsettled updates, oldest first."""
        with self._lock:
            return self._next, [self._unsettled[k] for k in sorted(self._unsettled)]

"""The ``getUpdates`` offset, persisted so a restart neither replays nor loses updates.

One small JSON file per bot (``telegram/offset-<bot id>.json`` in the data dir: a new token for
another bot starts clean), replaced atomically. The poller saves it only after the updates
below it were handed to the engine's queue.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from iris_runtime.private_files import private_dir, write_private_file

log = logging.getLogger(__name__)


class OffsetStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_bot(cls, data_dir: Path, bot_id: str) -> OffsetStore:
        return cls(data_dir / "telegram" / f"offset-{bot_id}.json")

    def load(self) -> int | None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable Telegram offset file %s: %s", self.path, exc)
            return None
        offset = raw.get("offset") if isinstance(raw, dict) else None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            log.warning("ignoring the Telegram offset file %s: no valid offset in it", self.path)
            return None
        return offset

    def save(self, offset: int) -> None:
        private_dir(self.path.parent)
        write_private_file(self.path, json.dumps({"offset": offset}).encode())

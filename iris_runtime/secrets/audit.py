"""The secrets audit trail: ``<data>/audit/secrets.jsonl``, one JSON line per secret request.

Each line records when, who (the caller derived from the token), which name, what was asked
(``read``, ``write``, ``delete``, ``list``), the decision and the request id. Never the value.

Lines are appended with one ``write`` on an ``O_APPEND`` descriptor, so lines from gunicorn
threads and from ``iris secrets`` processes interleave whole. The file is 0600: who asked for
what is itself sensitive.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.private_files import UnsafeFile, open_private, private_dir

log = logging.getLogger(__name__)

AUDIT_FILE = Path(data_layout.AUDIT_DIR) / "secrets.jsonl"

# Decisions, in the words the audit log and `iris secrets audit --decision` use.
ALLOWED = "allowed"
DENIED = "denied"
MISSING = "missing"
INVALID = "invalid"
UNAUTHENTICATED = "unauthenticated"
UNAVAILABLE = "unavailable"
DECISIONS = (ALLOWED, DENIED, MISSING, INVALID, UNAUTHENTICATED, UNAVAILABLE)


@dataclass(frozen=True)
class AuditRecord:
    time: str
    caller: str
    action: str
    name: str
    decision: str
    request_id: str


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(self, caller: str, action: str, name: str, decision: str, request_id: str) -> None:
        entry = AuditRecord(
            time=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            caller=caller,
            action=action,
            name=name,
            decision=decision,
            request_id=request_id,
        )
        line = (json.dumps(asdict(entry), ensure_ascii=False) + "\n").encode("utf-8")
        try:
            with self._lock:
                private_dir(self.path.parent)
                fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            # The request itself must not fail because the trail could not be written; the
            # operator must hear about it, loudly.
            log.error("could not write the secrets audit log %s: %s", self.path, exc.strerror)
        except UnsafeFile as exc:  # a symlink (say) planted where the log belongs
            log.error("could not write the secrets audit log: %s", exc.message)

    def records(self) -> Iterator[AuditRecord]:
        """Every readable line, oldest first; torn or foreign lines are skipped."""
        try:
            handle = self.path.open(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        with handle:
            for line in handle:
                record = _parse(line)
                if record is not None:
                    yield record


def _parse(line: str) -> AuditRecord | None:
    try:
        data = json.loads(line)
        return AuditRecord(**{k: str(data[k]) for k in AuditRecord.__dataclass_fields__})
    except (ValueError, KeyError, TypeError):
        return None


def audit_log_for(data_dir: Path) -> AuditLog:
    return AuditLog(data_dir / AUDIT_FILE)

"""Files Iris writes for other programs to read, which hold no secret (mode 0644): systemd
units, Terraform's ``agents.tf``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from iris_runtime.errors import ProvisionError


def write_public_file(path: Path, text: str, *, hint: str = "") -> None:
    """Atomically replace ``path`` with ``text`` (0644): readers see the old file or the whole
    new one. A folder that takes no new file is a ProvisionError naming it, then ``hint``."""
    try:
        fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ProvisionError(f"cannot write to {path.parent}: {exc.strerror}{hint}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        raise

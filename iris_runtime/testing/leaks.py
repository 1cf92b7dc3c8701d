"""A leak scan: known secret values ("canaries") planted in a test, looked for afterwards in every
place a secret must never be — files (logs, job logs, session logs, the audit log, anything a
test's processes wrote) and the command lines of every process that ran meanwhile.

``CommandLineSampler`` reads ``/proc/*/cmdline`` in a background thread while the test runs: a
secret passed as an argument is visible to every user of the host for as long as its process
lives, so sampling often catches most (a process shorter than the interval can slip through:
where a journal exists, its ``_CMDLINE`` fields are a second record). ``scan_files`` reads every
regular file under a folder; a caller allows a canary in the secret store's own data and in
the 0600 token file that exists to hold it, and nowhere else. A finding names the canary by its
label, never by its value, so the failure message does not spread the secret further.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

# Files above this size are read in pieces, overlapping by the longest canary.
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Leak:
    canary: str  # the label, not the value
    where: str

    def __str__(self) -> str:
        return f"{self.canary} in {self.where}"


def find_canaries(data: bytes, canaries: Mapping[str, str]) -> list[str]:
    """The labels of the canaries whose value occurs in ``data``."""
    return [label for label, value in canaries.items() if value and value.encode() in data]


class CommandLineSampler:
    """Every distinct command line seen in ``/proc`` between ``start()`` and ``stop()``."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.seen: dict[bytes, int] = {}  # command line → pid of its first sighting
        self.rounds = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cmdline-sampler", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self.sample()
            self._stopped.wait(self.interval)

    def sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    line = handle.read()
            except OSError:
                continue  # it ended meanwhile
            if line:
                self.seen.setdefault(line, int(entry.name))
        self.rounds += 1

    def leaks(self, canaries: Mapping[str, str]) -> list[Leak]:
        found = []
        for line, pid in list(self.seen.items()):
            shown = line.replace(b"\0", b" ").decode(errors="replace")
            for label in find_canaries(line, canaries):
                command = shown.split(" ", 1)[0]
                found.append(Leak(label, f"the command line of pid {pid} ({command} ...)"))
        return found


# Whether a canary (by its label) may be in a file: the store's own data, a token file and the
# token it exists to hold.
Allowance = Callable[[Path, str], bool]


def private_file(names: Iterable[str], holding: Iterable[str]) -> Allowance:
    """Allows the canaries labelled ``holding`` in files named ``names`` that only their owner
    can read or write: a token file holds its token, and nothing else."""
    named, held = frozenset(names), frozenset(holding)

    def allowed(path: Path, label: str) -> bool:
        if path.name not in named or label not in held:
            return False
        mode = os.stat(path, follow_symlinks=False).st_mode
        return stat.S_ISREG(mode) and not mode & 0o077

    return allowed


def under(*folders: Path) -> Allowance:
    """Allows everything below ``folders`` (a secret store's own data)."""
    roots = [folder.resolve() for folder in folders]

    def allowed(path: Path, label: str) -> bool:
        resolved = path.resolve()
        return any(resolved.is_relative_to(root) for root in roots)

    return allowed


def scan_files(
    root: Path, canaries: Mapping[str, str], allowed: Iterable[Allowance] = ()
) -> list[Leak]:
    """Every canary in a regular file under ``root`` (symlinks not followed) that no
    ``allowed`` check accepts there. A folder or file that cannot be read is a finding too:
    what was not read was not checked."""
    checks = list(allowed)
    overlap = max((len(value.encode()) for value in canaries.values()), default=1)
    found: list[Leak] = []

    def unreadable(error: OSError) -> None:
        if not isinstance(error, FileNotFoundError):  # gone meanwhile: nothing to read
            found.append(Leak("(unreadable)", f"{error.filename}: {error.strerror}"))

    for folder, _, files in os.walk(root, onerror=unreadable):
        for name in files:
            path = Path(folder) / name
            if not path.is_file() or path.is_symlink():
                continue
            try:
                labels = _file_canaries(path, canaries, overlap)
            except OSError as error:
                unreadable(error)
                continue
            found += [
                Leak(label, str(path))
                for label in sorted(labels)
                if not any(check(path, label) for check in checks)
            ]
    return found


def _file_canaries(path: Path, canaries: Mapping[str, str], overlap: int) -> set[str]:
    labels: set[str] = set()
    with open(path, "rb") as handle:
        tail = b""
        while chunk := handle.read(_CHUNK):
            labels.update(find_canaries(tail + chunk, canaries))
            tail = chunk[-overlap:]
    return labels

"""What ``/proc`` says about a server's processes: the gunicorn master's workers, their memory
(VmRSS, summed over a process tree or a process group, or sampled at its peak) and CPU time."""

from __future__ import annotations

import threading
from pathlib import Path

KB_PER_MB = 1024.0  # /proc/<pid>/status counts in kB
CLOCK_TICKS = 100.0  # /proc/<pid>/stat's utime and stime unit (USER_HZ)


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses):
    field 3 (state) first. Raises OSError when the process is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _ppid(pid: int) -> int | None:
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """Direct children of ``pid``: from /proc/<pid>/task/*/children when the kernel has it,
    else by scanning /proc for processes whose parent is ``pid``."""
    tasks = Path(f"/proc/{pid}/task")
    found: set[int] = set()
    listed = False
    for task in tasks.glob("*"):
        path = task / "children"
        try:
            found.update(int(child) for child in path.read_text().split())
            listed = True
        except OSError:
            continue
    if listed:
        return sorted(found)
    return sorted(
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _ppid(int(entry.name)) == pid
    )


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    pending = children(pid)
    while pending:
        child = pending.pop()
        out.append(child)
        pending.extend(children(child))
    return out


def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (``VmRSS``, ``VmHWM``...), 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pid: int) -> float:
    """VmRSS of one process in MB (MiB), 0 if it is gone."""
    return status_kb(pid, "VmRSS") / KB_PER_MB


def server_rss(master: int) -> float:
    """VmRSS of the gunicorn master plus all its descendants, in MB."""
    return rss_mb(master) + sum(rss_mb(pid) for pid in descendants(master))


def group_rss_mb(pgid: int) -> float:
    """VmRSS summed over every process whose process group is ``pgid`` (MB)."""
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat_fields(int(entry.name))[2]) != pgid:
                continue
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        total_kb += status_kb(int(entry.name), "VmRSS")
    return total_kb / KB_PER_MB


def worker_cpu_s(master: int) -> float:
    """CPU seconds (user + system) the master's direct children (the workers) have used."""
    total = 0.0
    for pid in children(master):
        fields = _stat_fields(pid)
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


class PeakRss:
    """Samples a server's RSS (master + descendants) every ``interval`` seconds in a thread of
    its own while the block runs; ``peak_mb`` is the highest seen (sampling outside the clients'
    locks, so it does not slow them)."""

    def __init__(self, master: int, interval: float = 0.05) -> None:
        self.master = master
        self.interval = interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, server_rss(self.master))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

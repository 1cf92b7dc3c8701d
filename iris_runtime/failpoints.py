"""Failpoints: named places where a fault trial may kill Iris on purpose.

The crash trials (``tests/faults``, ``tests/session_agents``) must kill Iris at exact moments —
between writing an announce and delivering it, say — which no outside timing can hit reliably.
With ``IRIS_FAILPOINT_FILE`` set, :func:`failpoint` reads that file when execution passes a
named point; if the file names the point, it is removed (so the restarted process goes on) and
the process kills itself with SIGKILL: no cleanup, no flush, as a power cut would. Without the
variable a failpoint costs one dictionary lookup. Operators never set it; a file that is not
Iris's own (another user's, or a link) arms nothing, so a variable left set by mistake hands no
one else a switch that kills Iris.
"""

from __future__ import annotations

import os
import signal
import stat

_VARIABLE = "IRIS_FAILPOINT_FILE"


def failpoint(name: str) -> None:
    path = os.environ.get(_VARIABLE)
    if not path:
        return
    armed = _armed(path)
    if armed != name:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # another thread fired it first
    os.kill(os.getpid(), signal.SIGKILL)


def _armed(path: str) -> str:
    """The point named in ``path``, if it is a regular file of this process's user."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return ""
        return os.read(fd, 256).decode("utf-8", errors="replace").strip()
    finally:
        os.close(fd)

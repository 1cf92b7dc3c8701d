"""Failpoints: named places where a fault trial may kill Iris on purpose.

The crash trials (``tests/faults``, ``tests/session_agents``) must kill Iris at exact moments —
between writing an announce and delivering it, say — which no outside timing can hit reliably.
With ``IRIS_FAILPOINT_FILE`` set, :func:`failpoint` reads that file when execution passes a
named point; if the file names the point, it is removed (so the restarted process goes on) and
the process kills itself with SIGKILL: no cleanup, no flush, as a power cut would. Without the
variable a failpoint costs one dictionary lookup. Operators never set it.
"""

from __future__ import annotations

import os
import signal

_VARIABLE = "IRIS_FAILPOINT_FILE"


def failpoint(name: str) -> None:
    path = os.environ.get(_VARIABLE)
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as handle:
            armed = handle.read().strip()
    except OSError:
        return
    if armed != name:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # another thread fired it first
    os.kill(os.getpid(), signal.SIGKILL)

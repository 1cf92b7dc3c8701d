"""The shipped relay fake (:mod:`iris_runtime.testing.relay_agent`) taught one more word for crash
trials: ``drip N MS [HOLD_MS]`` streams N deltas ``MS`` milliseconds apart, holds the turn open
``HOLD_MS`` more, then ends it. A turn that lasts a known while gives a kill a span to land in,
and the hold keeps a kill that a loaded machine delivers late inside the turn; every other word
is the fake's own.

Run as a script (``python dripping_relay.py PORT SOCKET RECORD``), through :class:`DrippingRelay`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from iris_runtime.testing import relay_agent
from iris_runtime.testing.relay_agent import RelayAgent

SCRIPT = Path(__file__).resolve()
_plain_answer = relay_agent._answer


def _answer(reach: relay_agent.Reach, msg: dict[str, Any], word: str, rest: str) -> None:
    if word != "drip":
        _plain_answer(reach, msg, word, rest)
        return
    count, pause_ms, hold_ms = ([int(n) for n in rest.split()[:3]] + [0])[:3]
    reach.pause = pause_ms / 1000  # before every request, done included
    for n in range(count):
        reach("turn.delta", turn_id=msg["turn_id"], text=f"{n} ")
    time.sleep(hold_ms / 1000)
    reach("turn.done", turn_id=msg["turn_id"])


class DrippingRelay(RelayAgent):
    """The relay fake as a real process, with ``drip``, which a test can SIGKILL and start again."""

    def program(self) -> list[str]:
        return [sys.executable, str(SCRIPT)]

    def kill(self) -> None:
        """SIGKILL, as a crash: no goodbye to anyone."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)


if __name__ == "__main__":
    relay_agent._answer = _answer  # answer() looks it up for every message
    relay_agent.main()

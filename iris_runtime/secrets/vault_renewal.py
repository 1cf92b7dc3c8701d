"""The daemon timer that keeps a Vault token fresh while Iris is idle.

Requests renew the token on their way (:meth:`VaultConnection.ensure_login`); without
requests nothing would, and a periodic token would lapse. The timer wakes when renewal is due,
backs off while Vault is away and says so once per outage, not on every retry.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Protocol

from iris_runtime.secrets.backend import SecretStoreUnavailable

log = logging.getLogger(__name__)

# The timer wakes at least this often, and never more often than the minimum.
TIMER_MAX_SLEEP = 300.0
TIMER_MIN_SLEEP = 0.5
TIMER_MAX_BACKOFF = 60.0


class Renewable(Protocol):
    """What the timer needs of a connection (a protocol, so this module does not import it)."""

    def next_renewal_in(self) -> float: ...

    def ensure_login(self, *, strict: bool = False) -> None: ...


class RenewTimer:
    """Renews the token in the background of an idle process.

    The thread holds only a weak reference, so a dropped connection is collected and its timer
    ends on the next wake-up.
    """

    def __init__(self, connection: Renewable) -> None:
        self._stop = threading.Event()
        ref = weakref.ref(connection)
        self._thread = threading.Thread(
            target=_renew_loop, args=(ref, self._stop), name="iris-vault-renew", daemon=True
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()


def _renew_loop(ref: weakref.ref[Renewable], stop: threading.Event) -> None:
    failures = 0
    while True:
        connection = ref()
        if connection is None:
            return
        pause = max(TIMER_MIN_SLEEP, connection.next_renewal_in())
        if failures:
            pause = max(pause, min(TIMER_MAX_BACKOFF, 2.0**failures))
        del connection  # no strong reference while asleep
        if stop.wait(min(TIMER_MAX_SLEEP, pause)):
            return
        connection = ref()
        if connection is None:
            return
        try:
            connection.ensure_login(strict=True)
        except SecretStoreUnavailable as exc:
            # Said once per outage, not every retry; messages are safe by construction.
            level = logging.WARNING if failures == 0 else logging.DEBUG
            log.log(level, "vault: background token renewal failed: %s", exc.message)
            failures += 1
        else:
            if failures:
                log.info("vault: background token renewal works again")
            failures = 0
        del connection

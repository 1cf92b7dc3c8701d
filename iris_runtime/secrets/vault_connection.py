"""The authenticated connection to Vault/OpenBao that the backend and the per-agent identity
share.

- One hvac client serves every gunicorn thread. Its requests session gets a connection pool big
  enough for a burst of concurrent reads, so threads do not queue behind each other or churn
  sockets.
- Authentication (a static token or an AppRole login) is state shared by all threads. Logging
  in and renewing happen under one lock; the common path (a valid token) takes no lock at all.
  The token is renewed when less than a third of its TTL is left: checked before each request
  and by a small daemon timer, so an idle Iris does not let a periodic token lapse.
- ``IRIS_VAULT_ADDR`` may list every node of an HA cluster: each request moves on to the next
  node when the current one stops answering (:mod:`iris_runtime.secrets.vault_nodes`).
- Vault being down, sealed or refusing us is an operational state, not a bug: every such
  failure becomes :class:`SecretStoreUnavailable` (:mod:`iris_runtime.secrets.vault_errors`),
  and the next request simply tries again, so Iris recovers by itself once Vault is back. Our
  errors are raised outside the ``except`` block, so they carry no hvac cause or context.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import hvac
import hvac.exceptions as hvac_errors
import requests
from requests.adapters import HTTPAdapter

from iris_runtime.errors import IrisError
from iris_runtime.secrets.backend import SecretStoreUnavailable
from iris_runtime.secrets.vault_errors import (
    DENIED,
    FAILURES,
    quote_vault_error,
    translate_vault_error,
)
from iris_runtime.secrets.vault_nodes import VaultNodes
from iris_runtime.secrets.vault_renewal import RenewTimer

if TYPE_CHECKING:
    from iris_runtime.config import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

# Connections kept per host: more than the default 10, so a burst of concurrent reads from
# gunicorn's threads reuses sockets instead of opening and dropping one per request.
POOL_SIZE = 64
# Renew once less than this fraction of the granted TTL is left.
RENEW_FRACTION = 1 / 3
# After a failed renewal of a still-valid token, try again this much later.
RENEW_RETRY_SECONDS = 2.0


def new_client(
    settings: Settings,
    token: str = "",
    *,
    url: str | None = None,
    session: requests.Session | None = None,
) -> hvac.Client:
    """An hvac client for ``url`` (else the first of ``settings.vault_addrs``) with a pooled
    session (``session``: share another client's pool).

    ``token=""`` (not None) keeps hvac from picking up ``VAULT_TOKEN`` or ``~/.vault-token``:
    the settings are the only source of configuration.
    """
    if session is None:
        session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        # hvac takes ``verify`` from a given session over its own argument, so set it here.
        session.verify = settings.vault_cacert or True
    return hvac.Client(
        url=url or settings.vault_addrs[0],
        token=token,
        verify=settings.vault_cacert or True,
        timeout=settings.vault_timeout_seconds,
        session=session,
    )


def as_dict(response: object) -> dict[str, Any]:
    """hvac's JSON body, or {} for a bodiless answer (hvac returns a Response for a 204)."""
    return response if isinstance(response, dict) else {}


class VaultConnection:
    """An authenticated hvac client shared by threads.

    ``call(op)`` runs ``op(client)`` after making sure the token is fresh, retries once after a
    re-login when a 403 turns out to be an expired token, and turns every failure into
    :class:`SecretStoreUnavailable`. With ``client`` given, that client is used as it is and its
    authentication is the caller's business (tests, admin tools).
    """

    def __init__(self, settings: Settings, *, client: hvac.Client | None = None) -> None:
        self._settings = settings
        self._managed = client is None
        self._client = client if client is not None else new_client(settings)
        # Every node of an HA cluster, a client each sharing the pool; a caller's own client
        # keeps its one address.
        others = [
            new_client(settings, url=addr, session=self._client.adapter.session)
            for addr in (settings.vault_addrs[1:] if self._managed else ())
        ]
        self.nodes = VaultNodes([self._client, *others])
        self._lock = threading.Lock()
        self._logged_in = not self._managed
        # Bumped on each login, so threads that all saw the same 403 re-login only once.
        self._generation = 0
        self._granted_ttl = 0.0
        self._expires_at = math.inf
        self._renew_at = math.inf
        self._renewable = False
        self._timer: RenewTimer | None = None

    @property
    def addr(self) -> str:
        return self.nodes.describe()

    @property
    def auth_method(self) -> str:
        if not self._managed:
            return "external client"
        return "approle" if self._settings.vault_role_id else "token"

    @property
    def client(self) -> hvac.Client:
        return self._client

    @property
    def logins(self) -> int:
        """How many times this connection logged in (diagnostics)."""
        return self._generation

    def close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._client.adapter.close()

    # -- requests ---------------------------------------------------------------------------

    def call(
        self,
        op: Callable[[hvac.Client], T],
        *,
        what: str,
        scrub: Iterable[str] = (),
        idempotent: bool = False,
    ) -> T:
        """``op(client)``, authenticated; failures become :class:`SecretStoreUnavailable`.
        ``idempotent`` (a read) may be sent to another node after a timeout."""
        for attempt in (1, 2):
            self.ensure_login()
            generation = self._generation
            error: IrisError | None = None
            try:
                return self.nodes.run(op, idempotent=idempotent)
            except DENIED:
                pass  # decided below, outside the handler, so no hvac context is attached
            except FAILURES as exc:
                error = self._translate(exc, what, scrub)
            if error is not None:
                raise error
            if attempt == 2 or not self._relogin_after_denied(generation):
                break
        raise SecretStoreUnavailable(
            f"Vault at {self.addr} denied {what}: permission denied (check the policy of the "
            "token Iris uses)"
        )

    def raw(
        self,
        op: Callable[[hvac.Client], T],
        *,
        what: str,
        scrub: Iterable[str] = (),
        idempotent: bool = False,
    ) -> T:
        """``op(client)`` with no authentication step and no retry, failures translated."""
        error: IrisError
        try:
            return self.nodes.run(op, idempotent=idempotent)
        except FAILURES as exc:
            error = self._translate(exc, what, scrub)
        raise error

    # -- authentication ---------------------------------------------------------------------

    def ensure_login(self, *, strict: bool = False) -> None:
        """Log in if we never did; renew (or log in again) when the token is due.

        A failed renewal while the token is still valid is not the request's problem: it is
        retried a little later and the request goes ahead (``strict`` raises it anyway).
        """
        if not self._managed:
            return
        if self._logged_in and time.monotonic() < self._renew_at:
            return
        with self._lock:
            if not self._logged_in:
                self._login_locked()
            elif time.monotonic() >= self._renew_at:
                self._refresh_or_defer_locked(strict)

    def _refresh_or_defer_locked(self, strict: bool) -> None:
        try:
            self._refresh_locked()
        except SecretStoreUnavailable as exc:
            now = time.monotonic()
            if now >= self._expires_at:
                raise  # no valid token to fall back on
            self._renew_at = min(self._expires_at, now + RENEW_RETRY_SECONDS)
            if strict:
                raise
            log.debug("vault: token renewal deferred: %s", exc.message)

    def check_token(self) -> None:
        """Ask Vault about our token: proves it is reachable, unsealed and accepts us."""
        self.ensure_login()
        if self._managed:
            self.raw(lambda c: c.auth.token.lookup_self(), what="the token lookup", idempotent=True)

    def _login_locked(self) -> None:
        settings = self._settings
        if settings.vault_role_id:
            reply = as_dict(
                self._login_call(
                    lambda c: c.auth.approle.login(
                        settings.vault_role_id, settings.vault_secret_id, use_token=False
                    ),
                    "AppRole login",
                )
            )
            auth = reply.get("auth") or {}
            self.nodes.set_token(str(auth.get("client_token") or ""))
            ttl, renewable = float(auth.get("lease_duration") or 0), bool(auth.get("renewable"))
        elif settings.vault_token:
            self.nodes.set_token(settings.vault_token)
            reply = as_dict(
                self._login_call(
                    lambda c: c.auth.token.lookup_self(), "token login", idempotent=True
                )
            )
            data = reply.get("data") or {}
            ttl, renewable = float(data.get("ttl") or 0), bool(data.get("renewable"))
        else:
            raise SecretStoreUnavailable(
                f"Vault at {self.addr}: no credentials configured; set IRIS_VAULT_TOKEN (or "
                "IRIS_VAULT_TOKEN_FILE), or IRIS_VAULT_ROLE_ID and IRIS_VAULT_SECRET_ID"
            )
        self._set_lease(ttl, renewable)
        self._logged_in = True
        self._generation += 1
        log.info("vault: %s login succeeded (token ttl %s)", self.auth_method, _ttl_text(ttl))

    def _login_call(
        self, op: Callable[[hvac.Client], object], what: str, *, idempotent: bool = False
    ) -> object:
        error: IrisError
        try:
            return self.nodes.run(op, idempotent=idempotent)
        except (*DENIED, hvac_errors.InvalidRequest) as exc:
            reason = quote_vault_error(exc, self._secrets()) or "refused"
            error = SecretStoreUnavailable(
                f"Vault at {self.addr} refused the {what} ({reason}); check "
                + (
                    "IRIS_VAULT_ROLE_ID and IRIS_VAULT_SECRET_ID"
                    if what.startswith("AppRole")
                    else "IRIS_VAULT_TOKEN (the token needs the default policy's lookup-self)"
                )
            )
        except FAILURES as exc:
            error = self._translate(exc, f"the {what}", ())
        raise error

    def _refresh_locked(self) -> None:
        approle = bool(self._settings.vault_role_id)
        if approle and (not self._renewable or time.monotonic() >= self._expires_at):
            self._login_locked()  # nothing left to renew: a fresh login is the only way
            return
        if not self._renewable:
            self._renew_at = math.inf  # a fixed-lifetime token: ride it out, 403s will tell
            return
        refused = False
        error: IrisError | None = None
        reply: dict[str, Any] = {}
        try:
            reply = as_dict(self.nodes.run(lambda c: c.auth.token.renew_self()))
        except (*DENIED, hvac_errors.InvalidRequest):
            refused = True
        except FAILURES as exc:
            error = self._translate(exc, "the token renewal", ())
        if error is not None:
            raise error
        if refused and not approle:
            raise self._token_dead()
        auth = reply.get("auth") or {}
        ttl = float(auth.get("lease_duration") or 0)
        capped = ttl < self._granted_ttl * RENEW_FRACTION
        if refused or (approle and capped):
            # Renewal refused (revoked, expired) or capped by the max TTL: a new login is
            # the way to a token that lasts.
            self._login_locked()
            return
        self._set_lease(ttl, bool(auth.get("renewable")), keep_granted=True)
        if capped:
            # A static token near its max TTL: renewing again gains nothing, only load.
            self._renew_at = math.inf
            log.warning(
                "vault: the configured token reaches its max TTL in %s; set a new "
                "IRIS_VAULT_TOKEN before then",
                _ttl_text(ttl),
            )
            return
        log.debug("vault: token renewed (ttl %s)", _ttl_text(ttl))

    def _relogin_after_denied(self, generation: int) -> bool:
        """After a 403: True when a retry may succeed (we logged in again, or another thread
        did), False when the 403 is a real "your policy does not allow this"."""
        if not self._managed:
            return False
        with self._lock:
            if generation != self._generation:
                return True
            if self._settings.vault_role_id:
                self._login_locked()
                return True
            dead = False
            error: IrisError | None = None
            try:
                self.nodes.run(lambda c: c.auth.token.lookup_self(), idempotent=True)
            except DENIED:
                dead = True
            except FAILURES as exc:
                error = self._translate(exc, "the token lookup", ())
            if error is not None:
                raise error
            if dead:
                raise self._token_dead()
            return False

    def _token_dead(self) -> SecretStoreUnavailable:
        return SecretStoreUnavailable(
            f"Vault at {self.addr} no longer accepts the configured token (expired or "
            "revoked); set a new IRIS_VAULT_TOKEN"
        )

    def _set_lease(self, ttl: float, renewable: bool, *, keep_granted: bool = False) -> None:
        now = time.monotonic()
        if not keep_granted or ttl > self._granted_ttl:
            self._granted_ttl = ttl
        self._renewable = renewable
        if ttl <= 0:  # a root token or one without expiry
            self._expires_at = self._renew_at = math.inf
            return
        self._expires_at = now + ttl
        self._renew_at = now + ttl * (1 - RENEW_FRACTION)
        if self._timer is None or not self._timer.alive:
            # Also after a fork: the child inherits the object but not the thread.
            self._timer = RenewTimer(self)

    def next_renewal_in(self) -> float:
        return max(0.0, self._renew_at - time.monotonic())

    # -- errors -----------------------------------------------------------------------------

    def _secrets(self, extra: Iterable[str] = ()) -> list[str]:
        settings = self._settings
        held = [settings.vault_token, settings.vault_secret_id, settings.vault_role_id]
        held.append(str(self._client.token or ""))
        return [s for s in (*held, *extra) if s]

    def _translate(self, exc: Exception, what: str, scrub: Iterable[str]) -> IrisError:
        return translate_vault_error(
            exc,
            where=f"Vault at {self.addr}",
            what=what,
            secrets=self._secrets(scrub),
            timeout_seconds=self._settings.vault_timeout_seconds,
        )


def _ttl_text(ttl: float) -> str:
    return "none (does not expire)" if ttl <= 0 else f"{ttl:g}s"

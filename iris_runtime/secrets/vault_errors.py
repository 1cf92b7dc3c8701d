"""What a failed Vault/OpenBao request becomes: one :class:`SecretStoreUnavailable` (HTTP 503)
naming the address and the cause, and nothing more.

Vault being down, sealed or refusing us is an operational state, not a bug, so every such
failure is an error the caller can show and retry. hvac exceptions carry request URLs,
response bodies and (through requests) headers. None of that may travel: callers raise our
errors outside the ``except`` block, so they have neither a cause nor a context, and any Vault
text we quote is scrubbed of the credentials we hold.
"""

from __future__ import annotations

from collections.abc import Iterable

import hvac.exceptions as hvac_errors
import requests

from iris_runtime.errors import IrisError
from iris_runtime.secrets.backend import SecretStoreUnavailable

# Vault's own error text is quoted (scrubbed) up to this length.
MAX_QUOTED = 200
MIN_SCRUBBED = 4

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (requests.exceptions.RequestException,)
VAULT_ERRORS: tuple[type[Exception], ...] = (hvac_errors.VaultError,)
# Everything a request to Vault may raise that is Vault's (or the network's) doing.
FAILURES: tuple[type[Exception], ...] = (*VAULT_ERRORS, *TRANSPORT_ERRORS)
DENIED = (hvac_errors.Forbidden, hvac_errors.Unauthorized)
_STATUS = {
    hvac_errors.InvalidRequest: 400,
    hvac_errors.Unauthorized: 401,
    hvac_errors.Forbidden: 403,
    hvac_errors.InvalidPath: 404,
    hvac_errors.RateLimitExceeded: 429,
    hvac_errors.InternalServerError: 500,
    hvac_errors.VaultNotInitialized: 501,
    hvac_errors.BadGateway: 502,
    hvac_errors.VaultDown: 503,
}


def translate_vault_error(
    exc: Exception,
    *,
    where: str,
    what: str,
    secrets: Iterable[str],
    timeout_seconds: float,
) -> IrisError:
    """``exc`` (raised while doing ``what`` against ``where``) as an error safe to show:
    a classification of the cause and Vault's own text with ``secrets`` blanked."""
    if isinstance(exc, requests.exceptions.Timeout):
        return SecretStoreUnavailable(
            f"{where} is unreachable: timed out after {timeout_seconds:g}s"
        )
    if isinstance(exc, requests.exceptions.SSLError):
        return SecretStoreUnavailable(
            f"{where} is unreachable: TLS verification failed (check IRIS_VAULT_CACERT)"
        )
    if isinstance(exc, requests.exceptions.RequestException):
        return SecretStoreUnavailable(f"{where} is unreachable: {_transport_cause(exc)}")
    quoted = quote_vault_error(exc, secrets)
    if isinstance(exc, hvac_errors.VaultDown):
        if "sealed" in quoted.lower():
            return SecretStoreUnavailable(f"{where} is sealed")
        return SecretStoreUnavailable(f"{where} is unavailable (HTTP 503: {quoted})")
    if isinstance(exc, hvac_errors.VaultNotInitialized):
        return SecretStoreUnavailable(f"{where} is not initialized")
    if isinstance(exc, DENIED):
        return SecretStoreUnavailable(f"{where} denied {what}: permission denied")
    status = _STATUS.get(type(exc), "error")
    detail = f": {quoted}" if quoted else ""
    return SecretStoreUnavailable(f"{where} failed {what} (HTTP {status}{detail})")


def quote_vault_error(exc: Exception, secrets: Iterable[str]) -> str:
    """Vault's own error text (never the response body), credentials blanked, shortened."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list):
        text = "; ".join(str(e) for e in errors)
    elif isinstance(errors, str):
        text = errors
    else:
        text = ""
    for secret in secrets:
        # Blanking a very short string would garble the text while protecting nothing.
        if len(secret) >= MIN_SCRUBBED:
            text = text.replace(secret, "****")
    text = " ".join(text.split())
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


def _transport_cause(exc: requests.exceptions.RequestException) -> str:
    # The message of a requests error embeds the URL; only a classification leaves here.
    text = str(exc).lower()
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "host name not found"
    if "reset by peer" in text or "remotedisconnected" in text or "aborted" in text:
        return "connection reset"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection failed"
    return "request failed"

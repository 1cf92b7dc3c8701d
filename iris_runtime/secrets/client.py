"""The broker as a sub-agent sees it: ``GET <IRIS_SECRET_BROKER_URL>/secrets/<name>`` with the
agent's own token.

In ``store`` and ``proxy`` modes a sub-agent starts with nothing but its identity, its token and
the broker's URL, so even its LLM key comes through here. Values are cached briefly (a provider
asks before every call); a rotated key is picked up within :data:`CACHE_SECONDS`. A broker on
another host is reached over verified TLS (``cacert``); plain HTTP only on loopback unless
``insecure`` (see :mod:`iris_runtime.tls`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote

import requests

from iris_runtime.errors import IrisError
from iris_runtime.tls import cacert_problem, plain_http_refusal, verify_setting

CACHE_SECONDS = 60.0
TIMEOUT_SECONDS = 10.0


class BrokerRefused(IrisError):
    """The broker answered, and the answer is no (401, 403, 404): retrying will not help."""

    code = "secret_refused"


class BrokerUnreachable(IrisError):
    """No answer, or the broker's store is down (503): worth retrying later."""

    code = "secret_broker_unreachable"
    status = 503


REFUSALS = {
    401: "the broker does not know this agent's token (is it registered in agents.json?)",
    403: "it is not on this agent's allow-list in agents.json",
    404: "the broker's store has no such secret",
}


@dataclass
class BrokerClient:
    url: str
    token: str = field(repr=False)
    cache_seconds: float = CACHE_SECONDS
    cacert: str | None = None
    insecure: bool = False
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    _cache: dict[str, tuple[float, str]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, name: str) -> str:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(name)
            if hit is not None and now - hit[0] < self.cache_seconds:
                return hit[1]
        value = self._fetch(name)
        with self._lock:
            self._cache[name] = (now, value)
        return value

    def _fetch(self, name: str) -> str:
        refusal = plain_http_refusal(self.url, "the secret broker", insecure=self.insecure)
        if refusal:
            raise BrokerRefused(refusal)
        where = f"{self.url}/secrets/{quote(name, safe='')}"
        try:
            response = self._session.get(
                where,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=TIMEOUT_SECONDS,
                verify=verify_setting(self.cacert),
            )
        except requests.exceptions.SSLError:
            raise BrokerUnreachable(
                f"secret broker at {self.url} failed TLS verification (check IRIS_TLS_CACERT)"
            ) from None
        except requests.RequestException as exc:
            raise BrokerUnreachable(
                f"secret broker at {self.url} is unreachable ({type(exc).__name__})"
            ) from None
        except OSError:  # requests' own check of the CA bundle path
            raise BrokerUnreachable(
                f"secret broker at {self.url}: "
                f"{cacert_problem(self.cacert) or 'IRIS_TLS_CACERT cannot be used'}"
            ) from None
        if response.status_code in REFUSALS:
            raise BrokerRefused(f"cannot get {name}: {REFUSALS[response.status_code]}")
        if response.status_code != 200:
            raise BrokerUnreachable(
                f"secret broker at {self.url} answered {response.status_code} for {name}"
            )
        try:
            value = response.json()["value"]
        except (ValueError, KeyError, TypeError):
            raise BrokerUnreachable(f"secret broker at {self.url} sent a malformed reply") from None
        if not isinstance(value, str):
            raise BrokerUnreachable(f"secret broker at {self.url} sent a malformed reply")
        return value

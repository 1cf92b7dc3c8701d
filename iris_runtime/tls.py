"""TLS between hosts: what an Iris serves off loopback, and what it accepts to call.

A fleet puts sub-agents on their own hosts, so the bridge (Iris → agent) and the broker
(agent → Iris) cross a network. The rule is the same on both ends:

- **Serving**: a listener bound to a loopback address speaks plain HTTP (local tools, health
  checks). A listener bound to anything else speaks TLS with ``IRIS_TLS_CERT``/``IRIS_TLS_KEY``
  (certificates from OpenBao's PKI engine or the operator's files), or refuses to start.
- **Calling**: ``https://`` URLs are verified against ``IRIS_TLS_CACERT`` (else the system's
  CAs); an ``http://`` URL is only called on a loopback host.
- ``IRIS_INSECURE_HTTP=1`` lifts both refusals, for a private network the operator trusts. It
  is explicit on purpose: plain HTTP carries bearer tokens and secret values.

Standard library only, so the config, the bridge client and the web worker can all use it.
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from iris_runtime.errors import ConfigError

INSECURE_VARIABLE = "IRIS_INSECURE_HTTP"
# The systemd credential (LoadCredential=) a unit hands its TLS key over as.
TLS_KEY_CREDENTIAL = "iris-tls-key"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the loopback names; False for anything else, including
    the unspecified address (0.0.0.0 listens on every interface)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1 on a dual-stack listener
    return address.is_loopback


def url_for(scheme: str, host: str, port: int) -> str:
    """``scheme://host:port``, an IPv6 literal bracketed (once)."""
    host = host.strip("[]")
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def plain_http_refusal(url: str, what: str, *, insecure: bool) -> str | None:
    """Why ``url`` must not be called, or None when it may: plain HTTP off loopback without
    the explicit insecure switch."""
    parts = urlsplit(url)
    if parts.scheme != "http" or insecure or is_loopback(parts.hostname or ""):
        return None
    return (
        f"{what} {url} is plain HTTP to another host: use https:// (and IRIS_TLS_CACERT for a "
        f"private CA), or set {INSECURE_VARIABLE}=1 to allow it on a network you trust"
    )


def cacert_problem(cacert: str | None) -> str | None:
    """Why ``IRIS_TLS_CACERT`` cannot be used (missing, unreadable, not PEM), or None."""
    if not cacert:
        return None
    try:
        if Path(cacert).is_dir():
            ssl.create_default_context(capath=cacert)
        else:
            ssl.create_default_context(cafile=cacert)
    except FileNotFoundError:
        return f"IRIS_TLS_CACERT {cacert} does not exist"
    except PermissionError:
        return f"IRIS_TLS_CACERT {cacert} cannot be read"
    except (ssl.SSLError, OSError, ValueError):
        return f"IRIS_TLS_CACERT {cacert} is not a PEM CA bundle"
    return None


def verify_setting(cacert: str | None) -> str | bool:
    """``requests``' ``verify``: the CA bundle, else the system's CAs (never False)."""
    return cacert or True


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The context of a TLS listener; a clear :class:`ConfigError` when the files do not make
    one. TLS 1.2 at least; the key file is read here, once, and never logged."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except FileNotFoundError as exc:
        raise ConfigError(f"IRIS_TLS_CERT/IRIS_TLS_KEY: {exc.filename} does not exist") from None
    except PermissionError as exc:
        raise ConfigError(f"IRIS_TLS_CERT/IRIS_TLS_KEY: cannot read {exc.filename}") from None
    except (ssl.SSLError, OSError):
        raise ConfigError(
            f"IRIS_TLS_CERT {cert} and IRIS_TLS_KEY {key} are not a PEM certificate (chain) and "
            "its private key"
        ) from None
    return context

"""``get-secret NAME``: one secret from the Iris secret broker, printed on stdout.

This runs inside agents' shells, which may be minimal containers holding nothing but a Python
interpreter, an agent token and the broker's URL, so it uses the standard library only and never
imports Iris. Its exit code is the whole interface for a script: 0 found, 2 usage or
configuration error, 3 refused (401 or 403), 4 no such secret, 5 broker unreachable or failing
(1 is a bug in this script).

The token is a bearer credential, so the request goes straight to the broker: no proxy from the
environment, no redirect followed (urllib would forward the Authorization header to wherever a
redirect points). Messages go to stderr, one line each, and name neither the token nor a value.
For the same reason a broker on another host is reached over TLS, verified against
``IRIS_TLS_CACERT`` (else the system's CAs): plain ``http://`` goes only to loopback unless
``IRIS_INSECURE_HTTP=1`` (Iris's own rule, :mod:`iris_runtime.tls`).
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from email.message import Message
from typing import IO, NoReturn
from urllib.parse import quote, urlsplit

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_DENIED = 3
EXIT_MISSING = 4
EXIT_UNREACHABLE = 5

# The broker's own rule (iris_runtime.secrets.backend.SECRET_NAME_RE), copied so this script
# needs nothing but the standard library; a test keeps the two identical.
SECRET_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
NAME_RULE = "use 1-128 of letters, digits, '_', '.', '-', starting with a letter or '_'"
DEFAULT_TIMEOUT_SECONDS = 10.0
RETRY_DELAY_SECONDS = 0.5
# A secret is at most 64 KiB; JSON escaping can grow it sixfold.
MAX_REPLY_BYTES = 1024 * 1024
PROG = "get-secret"


class Failure(Exception):
    """Ends the command: ``message`` (one line, no secrets) on stderr, exit ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Config:
    broker: str
    token: str = field(repr=False)
    timeout: float
    cafile: str | None = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> None:
        return None  # the 3xx then surfaces as an HTTPError, handled like any other status


def _opener(cafile: str | None = None) -> urllib.request.OpenerDirector:
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (ssl.SSLError, OSError, ValueError):
        raise Failure(
            EXIT_USAGE, f"IRIS_TLS_CACERT {cafile} is missing, unreadable or not a PEM CA bundle"
        ) from None
    tls = urllib.request.HTTPSHandler(context=context)
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect(), tls)


def _is_loopback(host: str) -> bool:
    """Iris's own rule (``iris_runtime.tls.is_loopback``, which this script must not import; a
    test keeps the two in step)."""
    host = host.strip("[]").lower()
    if host in {"localhost", "localhost.localdomain", "ip6-localhost"}:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


# -- configuration ------------------------------------------------------------------------------


def broker_url(env: dict[str, str]) -> str:
    """``IRIS_SECRET_BROKER_URL``, else this host's Iris API on ``IRIS_API_PORT`` (3000)."""
    url = env.get("IRIS_SECRET_BROKER_URL", "").strip().rstrip("/")
    if not url:
        port = env.get("IRIS_API_PORT", "").strip() or "3000"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise Failure(EXIT_USAGE, "IRIS_API_PORT is not a port number")
        url = f"http://127.0.0.1:{int(port)}"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise Failure(EXIT_USAGE, "IRIS_SECRET_BROKER_URL must be an http:// or https:// URL")
    insecure = env.get("IRIS_INSECURE_HTTP", "").strip().lower() in {"1", "true", "yes", "on"}
    if parts.scheme == "http" and not insecure and not _is_loopback(parts.hostname):
        raise Failure(
            EXIT_USAGE,
            "IRIS_SECRET_BROKER_URL is plain HTTP to another host: use https:// (and "
            "IRIS_TLS_CACERT for a private CA), or set IRIS_INSECURE_HTTP=1 on a trusted network",
        )
    return url


def agent_token(env: dict[str, str]) -> str:
    """The agent's token: the file named by ``IRIS_API_TOKEN_FILE`` (which keeps it out of the
    environment of everything the agent runs), else ``IRIS_API_TOKEN``."""
    path = env.get("IRIS_API_TOKEN_FILE", "").strip()
    if path:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as handle:
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise Failure(EXIT_USAGE, f"cannot read IRIS_API_TOKEN_FILE {path}: {reason}") from None
    else:
        token = env.get("IRIS_API_TOKEN", "").strip()
    if not token:
        raise Failure(EXIT_USAGE, "no agent token: set IRIS_API_TOKEN or IRIS_API_TOKEN_FILE")
    # Checked here because http.client quotes an invalid header value in its exception.
    if not all("!" <= char <= "~" for char in token):
        raise Failure(EXIT_USAGE, "the agent token has characters no token has (spaces, lines?)")
    return token


def timeout_seconds(env: dict[str, str]) -> float:
    raw = env.get("IRIS_SECRET_TIMEOUT_SECONDS", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise Failure(EXIT_USAGE, "IRIS_SECRET_TIMEOUT_SECONDS must be a number of seconds > 0")
    return value


def load_config(env: dict[str, str]) -> Config:
    cafile = env.get("IRIS_TLS_CACERT", "").strip() or None
    return Config(broker_url(env), agent_token(env), timeout_seconds(env), cafile)


def where(url: str) -> str:
    """The broker as messages may show it: without any ``user:password@``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


# -- the request --------------------------------------------------------------------------------


def fetch(config: Config, name: str) -> str:
    """The value of ``name``, or a :class:`Failure` saying why not."""
    request_id = uuid.uuid4().hex
    request = urllib.request.Request(  # noqa: S310 (scheme checked in broker_url)
        f"{config.broker}/secrets/{quote(name, safe='')}",
        headers={
            "Authorization": f"Bearer {config.token}",
            "Accept": "application/json",
            "X-Request-Id": request_id,  # the broker's audit line for this request carries it
        },
    )
    try:
        with _send(request, config) as response:
            return _value_from(response.read(MAX_REPLY_BYTES + 1), config)
    except urllib.error.HTTPError as error:
        try:
            raise _refusal(error.code, _error_code(error), name, config, request_id) from None
        finally:
            error.close()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise Failure(EXIT_UNREACHABLE, _unreachable(exc, config)) from None


def _send(request: urllib.request.Request, config: Config) -> IO[bytes]:
    """Open ``request``; a refused connection is tried once more (a broker restarting)."""
    try:
        response: IO[bytes] = _opener(config.cafile).open(request, timeout=config.timeout)
    except urllib.error.URLError as exc:
        if not isinstance(exc.reason, ConnectionRefusedError):
            raise
        time.sleep(RETRY_DELAY_SECONDS)
        response = _opener(config.cafile).open(request, timeout=config.timeout)
    return response


def _value_from(body: bytes, config: Config) -> str:
    try:
        value = json.loads(body)["value"] if len(body) <= MAX_REPLY_BYTES else None
    except (ValueError, KeyError, TypeError):
        value = None
    if not isinstance(value, str):
        raise Failure(
            EXIT_UNREACHABLE, f"the broker at {where(config.broker)} sent a malformed reply"
        )
    return value


def _error_code(error: urllib.error.HTTPError) -> str:
    """The ``code`` of an Iris error body, or "" for anything else."""
    try:
        code = json.loads(error.read(64 * 1024)).get("code", "")
    except (ValueError, AttributeError, OSError):
        return ""
    return code if isinstance(code, str) else ""


def _refusal(status: int, code: str, name: str, config: Config, request_id: str) -> Failure:
    broker = where(config.broker)
    ref = f"(HTTP {status}{', ' + code if code else ''}; request {request_id})"
    if status == 403:
        return Failure(
            EXIT_DENIED,
            f"denied: {name} is not on this agent's secrets allow-list {ref}; "
            "ask Iris or the operator to add it to this agent's allow-list",
        )
    if status == 401:
        return Failure(
            EXIT_DENIED,
            f"unauthorized: the broker at {broker} does not accept this agent's token {ref}; "
            "is the token registered for this agent?",
        )
    if status == 404 and code == "secret_not_found":
        return Failure(EXIT_MISSING, f"missing: the secret store has no {name} {ref}")
    if status == 400 and code == "invalid_secret_name":
        return Failure(EXIT_USAGE, f"invalid secret name: {NAME_RULE} {ref}")
    if status == 503 and code == "secret_store_unavailable":
        return Failure(EXIT_UNREACHABLE, f"the broker's secret store is unavailable {ref}")
    # Anything else (a 404 from something that is not Iris, a redirect, a 5xx) means the URL
    # does not lead to a working broker.
    return Failure(EXIT_UNREACHABLE, f"the broker at {broker} failed {ref}")


def _unreachable(exc: BaseException, config: Config) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = "TLS verification failed (check IRIS_TLS_CACERT)"
    elif isinstance(reason, TimeoutError):
        why = f"no answer within {config.timeout:g}s"
    elif isinstance(reason, ConnectionRefusedError):
        why = "connection refused"
    elif isinstance(reason, OSError) and reason.strerror:
        why = reason.strerror
    else:
        why = type(reason).__name__
    return f"the broker at {where(config.broker)} is unreachable: {why}"


# -- the command --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print one secret from the Iris secret broker on stdout.",
        epilog="Exit codes: 0 found, 2 usage or configuration error, 3 denied (403) or token "
        "refused (401), 4 no such secret, 5 broker unreachable or failing.",
    )
    parser.add_argument("name", metavar="NAME", help="the secret's name, e.g. SENDGRID_API_KEY")
    parser.add_argument(
        "--no-newline", action="store_true", help="print the value without a trailing newline"
    )
    return parser


def run(argv: list[str], env: dict[str, str], stdout: IO[bytes]) -> int:
    args = _parser().parse_args(argv)
    # The name is checked before anything else and never echoed: a mistyped command line may
    # carry a value where the name belongs.
    if not SECRET_NAME_RE.fullmatch(args.name):
        raise Failure(EXIT_USAGE, f"invalid secret name: {NAME_RULE}")
    value = fetch(load_config(env), args.name)
    stdout.write(value.encode("utf-8", "surrogatepass"))
    if not args.no_newline:
        stdout.write(b"\n")
    stdout.flush()
    return EXIT_OK


def main(argv: list[str] | None = None) -> NoReturn:
    try:
        code = run(sys.argv[1:] if argv is None else argv, dict(os.environ), sys.stdout.buffer)
    except Failure as failure:
        print(f"{PROG}: {failure.message}", file=sys.stderr)
        code = failure.code
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a bug: its message could quote what it failed on, so only the type
        print(f"{PROG}: internal error ({type(exc).__name__})", file=sys.stderr)
        code = EXIT_INTERNAL
    sys.exit(code)


if __name__ == "__main__":
    main()

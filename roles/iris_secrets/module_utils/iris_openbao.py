# Shared by this role's modules: a small OpenBao HTTP API client on the standard library only,
# so the managed host needs nothing beyond Python.
# MIT License (see the role's meta/main.yml).

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
from typing import Any

TIMEOUT = 30.0
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class OpenBaoError(Exception):
    """An API call that did not answer as expected. Never carries a request body."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def common_argument_spec() -> dict[str, Any]:
    return {
        "url": {"type": "str", "required": True},
        "ca_file": {"type": "str", "default": ""},
        "token": {"type": "str", "default": "", "no_log": True},
    }


class Client:
    """Talks JSON to ``url``/v1/...; the token travels in a header, never in a URL or argv."""

    def __init__(self, url: str, token: str = "", ca_file: str = "") -> None:
        if not url.startswith(("http://", "https://")):
            raise OpenBaoError(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file or None)
        # Never go through a proxy: the token must reach OpenBao and nothing else.
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=self.context),
        )

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body or {}). 404 is returned, not raised: callers decide."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        # The scheme is checked in __init__: http or https only.
        req = urllib.request.Request(f"{self.url}/v1/{path}", data=data, method=method)  # noqa: S310
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("X-Vault-Token", self.token)
        try:
            with self.opener.open(req, timeout=TIMEOUT) as response:
                return response.status, _json(response.read())
        except urllib.error.HTTPError as exc:
            payload = _json(exc.read())
            if exc.code == 404:
                return 404, payload
            errors = "; ".join(str(e) for e in payload.get("errors") or []) or exc.reason
            message = f"{method} /v1/{path}: HTTP {exc.code}: {errors}"
            raise OpenBaoError(message, exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OpenBaoError(f"{method} /v1/{path}: cannot reach {self.url}: {reason}") from None

    def get(self, path: str) -> dict[str, Any] | None:
        """The body of a read, or None when the path does not exist."""
        status, payload = self.request("GET", path)
        return None if status == 404 else payload

    def write(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)[1]


def _json(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def seconds(value: Any) -> int:
    """'1h' / '30m' / '90' / 90 -> seconds (what OpenBao reports back)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        return value
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration (use e.g. 90, 90s, 30m, 1h, 7d): {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]

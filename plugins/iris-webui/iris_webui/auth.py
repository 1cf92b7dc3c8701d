"""Who may use the Web UI: one-time login links, an optional password, and session cookies.

``IRIS_API_TOKEN`` is never involved: the browser never sees it and no route accepts it.

- A login link carries a one-time key. ``iris serve`` (the gunicorn master) makes it and stores
  only its SHA-256, with an expiry, in ``<data>/run/webui-login.json`` (0600); the worker
  consumes it on ``GET /login?key=…`` and marks it used, so a link works once, for ten minutes.
- With ``IRIS_WEBUI_PASSWORD`` set the password form works too: compared in constant time and
  rate-limited per client address.
- Either way the browser gets a session cookie (``iris_webui``: 32 random bytes). The server
  keeps only SHA-256 digests of live sessions, with their expiry, in ``<data>/webui/sessions.json``
  (0600), so a restart does not log anyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections import deque
from pathlib import Path

from iris_runtime.private_files import file_lock, private_dir, write_private_file

COOKIE_NAME = "iris_webui"
LOGIN_FILE = "webui-login.json"
KEY_TTL = 600.0  # seconds a login link stays valid
SESSION_TTL = 30 * 24 * 3600.0
FAILURES_ALLOWED = 5  # wrong passwords per address per window
FAILURE_WINDOW = 60.0


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def login_file(data_dir: Path) -> Path:
    return data_dir / "run" / LOGIN_FILE


def issue_login_key(data_dir: Path, *, ttl: float = KEY_TTL) -> str:
    """A fresh one-time key; only its digest is written. A newer key replaces an older one."""
    key = secrets.token_urlsafe(32)
    path = login_file(data_dir)
    private_dir(path.parent)
    record = {"sha256": _digest(key), "expires": time.time() + ttl, "used": False}
    with file_lock(path.with_name(LOGIN_FILE + ".lock")):
        write_private_file(path, json.dumps(record).encode())
    return key


def consume_login_key(data_dir: Path, key: str) -> str | None:
    """None when ``key`` is the current key, unused and unexpired (it is marked used now);
    else why not: ``invalid_key``, ``expired_key`` or ``used_key`` (for the login page)."""
    if not key or len(key) > 200:
        return "invalid_key"
    path = login_file(data_dir)
    if not path.parent.is_dir():
        return "invalid_key"
    with file_lock(path.with_name(LOGIN_FILE + ".lock")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "invalid_key"
        if not isinstance(record, dict):
            return "invalid_key"
        expected = record.get("sha256")
        expires = record.get("expires")
        if not isinstance(expected, str) or not isinstance(expires, (int, float)):
            return "invalid_key"
        if not hmac.compare_digest(_digest(key), expected):
            return "invalid_key"
        if record.get("used") is not False:
            return "used_key"
        if time.time() > expires:
            return "expired_key"
        record["used"] = True
        write_private_file(path, json.dumps(record).encode())
        return None


class LoginSessions:
    """Live browser sessions, by the SHA-256 of their cookie value."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "webui" / "sessions.json"
        self._lock = threading.Lock()
        self._live: dict[str, float] = self._load()

    def _load(self) -> dict[str, float]:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        now = time.time()
        return {
            k: float(v)
            for k, v in raw.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and v > now
        }

    def _save(self) -> None:
        # Called with the lock held.
        private_dir(self._path.parent)
        write_private_file(self._path, json.dumps(self._live).encode())

    def create(self) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.time()
            self._live = {k: v for k, v in self._live.items() if v > now}
            self._live[_digest(token)] = now + SESSION_TTL
            self._save()
        return token

    def valid(self, token: str | None) -> bool:
        if not token or len(token) > 200:
            return False
        with self._lock:
            expires = self._live.get(_digest(token))
        return expires is not None and expires > time.time()

    def revoke(self, token: str | None) -> None:
        if not token:
            return
        with self._lock:
            if self._live.pop(_digest(token), None) is not None:
                self._save()


class PasswordGate:
    """The optional password, with a per-address limit on wrong guesses."""

    def __init__(self, password: str | None) -> None:
        self._password = password
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._password is not None

    def blocked(self, address: str) -> bool:
        with self._lock:
            recent = self._recent(address)
            return len(recent) >= FAILURES_ALLOWED

    def check(self, address: str, candidate: str) -> bool:
        if self._password is None:
            return False
        ok = hmac.compare_digest(candidate.encode("utf-8"), self._password.encode("utf-8"))
        if not ok:
            with self._lock:
                self._recent(address).append(time.monotonic())
                if len(self._failures) > 10_000:  # many addresses: forget the quiet ones
                    for quiet in [a for a, q in self._failures.items() if not q]:
                        del self._failures[quiet]
        return ok

    def _recent(self, address: str) -> deque[float]:
        # Called with the lock held.
        queue = self._failures.setdefault(address, deque())
        cutoff = time.monotonic() - FAILURE_WINDOW
        while queue and queue[0] < cutoff:
            queue.popleft()
        return queue

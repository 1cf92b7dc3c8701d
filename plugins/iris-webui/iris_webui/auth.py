"""Who may use the Web UI: one-time login links, an optional password, and session cookies.

``IRIS_API_TOKEN`` is never involved: the browser never sees it and no route accepts it.

- A login link carries a one-time key. ``iris serve`` (the gunicorn master) makes it and stores
  only its SHA-256, with an expiry, in ``<data>/run/webui-login.json`` (0600); the worker
  consumes it on ``GET /login?key=…`` and marks it used, so a link works once, for ten minutes.
- With ``IRIS_WEBUI_PASSWORD`` set the password form works too: compared in constant time and
  rate-limited per client address and overall.
- Either way the browser gets a session cookie (``iris_webui``: 32 random bytes) and a page key
  (32 random bytes, see :class:`LoginSessions`). The server keeps only SHA-256 digests of both,
  with the expiry, in ``<data>/webui/sessions.json`` (0600), so a restart does not log anyone
  out.
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

from iris_runtime import data_layout
from iris_runtime.private_files import file_lock, private_dir, write_private_file

COOKIE_NAME = "iris_webui"
LOGIN_FILE = "webui-login.json"
KEY_TTL = 600.0  # seconds a login link stays valid
SESSION_TTL = 30 * 24 * 3600.0
FAILURES_ALLOWED = 5  # wrong passwords per address per window
GLOBAL_FAILURES_ALLOWED = 20  # wrong passwords from everyone together per window
FAILURE_WINDOW = 60.0


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def login_file(data_dir: Path) -> Path:
    return data_dir / data_layout.RUN_DIR / LOGIN_FILE


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
    """Live browser sessions, by the SHA-256 of their cookie value, each with the SHA-256 of its
    page key.

    The cookie alone authorises nothing but the static pages: browsers send cookies for
    127.0.0.1 to every port on it, so any local service (or a sub-agent's page) could replay
    one. The page key is handed to the page once, at login (in the URL fragment or the JSON
    answer), kept in the origin's ``localStorage`` and sent as ``X-Iris-Page-Key`` (and in the
    socket's ``hello``): another port is another origin and never sees it.
    """

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / data_layout.WEBUI_DIR / "sessions.json"
        self._lock = threading.Lock()
        self._live: dict[str, tuple[float, str]] = self._load()

    def _load(self) -> dict[str, tuple[float, str]]:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        now = time.time()
        live: dict[str, tuple[float, str]] = {}
        for k, v in raw.items():
            # Sessions from before page keys (a bare expiry) are dropped: log in again.
            if not isinstance(k, str) or not isinstance(v, dict):
                continue
            expires, page = v.get("expires"), v.get("page_key")
            if isinstance(expires, (int, float)) and expires > now and isinstance(page, str):
                live[k] = (float(expires), page)
        return live

    def _save(self) -> None:
        # Called with the lock held.
        private_dir(self._path.parent)
        data = {k: {"expires": e, "page_key": p} for k, (e, p) in self._live.items()}
        write_private_file(self._path, json.dumps(data).encode())

    def create(self) -> tuple[str, str]:
        """A new session: ``(cookie value, page key)``; only their digests are kept."""
        token = secrets.token_urlsafe(32)
        page_key = secrets.token_urlsafe(32)
        with self._lock:
            now = time.time()
            self._live = {k: v for k, v in self._live.items() if v[0] > now}
            self._live[_digest(token)] = (now + SESSION_TTL, _digest(page_key))
            self._save()
        return token, page_key

    def _record(self, token: str | None) -> tuple[float, str] | None:
        if not token or len(token) > 200:
            return None
        with self._lock:
            record = self._live.get(_digest(token))
        if record is None or record[0] <= time.time():
            return None
        return record

    def valid(self, token: str | None) -> bool:
        """The cookie names a live session (enough for the static pages only)."""
        return self._record(token) is not None

    def authorised(self, token: str | None, page_key: str | None) -> bool:
        """The cookie names a live session and ``page_key`` is that session's key."""
        record = self._record(token)
        if record is None or not page_key or len(page_key) > 200:
            return False
        return hmac.compare_digest(_digest(page_key), record[1])

    def revoke(self, token: str | None) -> None:
        if not token:
            return
        with self._lock:
            if self._live.pop(_digest(token), None) is not None:
                self._save()


def session_digest(token: str) -> str:
    """How a session is named in memory (open sockets remember it, for signing out)."""
    return _digest(token)


class PasswordGate:
    """The optional password, with a limit on wrong guesses per address and overall.

    Checking and recording happen under one lock, so parallel guesses cannot slip past the
    limit; the overall cap holds when the guesses come from many addresses (or through a local
    proxy, where every address is the same anyway). Memory is bounded: timestamps older than
    the window are dropped, and so are addresses with none left, so at most
    ``GLOBAL_FAILURES_ALLOWED`` timestamps are ever kept.
    """

    def __init__(self, password: str | None) -> None:
        self._password = password
        self._failures: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._password is not None

    def attempt(self, address: str, candidate: str) -> str | None:
        """None when ``candidate`` is the password; else ``rate_limited`` (not even compared)
        or ``invalid_password`` (and the failure counts)."""
        if self._password is None:
            return "password_disabled"
        with self._lock:
            now = time.monotonic()
            self._prune(now)
            recent = self._failures.get(address)
            if len(self._all) >= GLOBAL_FAILURES_ALLOWED or (
                recent is not None and len(recent) >= FAILURES_ALLOWED
            ):
                return "rate_limited"
            given = candidate.encode("utf-8", "surrogatepass")
            if hmac.compare_digest(given, self._password.encode("utf-8", "surrogatepass")):
                return None
            self._failures.setdefault(address, deque()).append(now)
            self._all.append(now)
            return "invalid_password"

    def _prune(self, now: float) -> None:
        # Called with the lock held.
        cutoff = now - FAILURE_WINDOW
        while self._all and self._all[0] < cutoff:
            self._all.popleft()
        for address in list(self._failures):
            queue = self._failures[address]
            while queue and queue[0] < cutoff:
                queue.popleft()
            if not queue:
                del self._failures[address]

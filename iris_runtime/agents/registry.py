"""The sub-agent registry: ``agents.json`` in the data dir.

Shape::

    {"<name>": {"bridge_url": "http://127.0.0.1:4000", "secrets": ["NAME", ...], "token": "..."}}

``secrets`` and ``token`` are optional. The file holds tokens, so it is treated as a secrets file:
it is always written with mode 0600 and never printed unmasked.

Concurrency: every read-modify-write holds an exclusive ``flock`` on the sibling
``agents.json.lock`` and ends with an atomic ``os.replace`` of a fully written, fsynced temp file,
so concurrent ``iris agents register`` processes never lose each other's entries. Readers take no
lock: they see either the old or the new file, never a torn one.

A file that does not parse or does not validate raises :class:`RegistryError` naming the file and
the problem; writers refuse to touch it, so a hand-edit gone wrong is never silently "repaired"
into an empty registry.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from iris_runtime import data_layout
from iris_runtime.errors import InvalidInput, IrisError
from iris_runtime.private_files import file_lock, write_private_file
from iris_runtime.secrets.backend import SECRET_NAME_RE

if TYPE_CHECKING:
    from iris_runtime.config import Settings

REGISTRY_FILE_NAME = data_layout.AGENTS_JSON
FILE_MODE = 0o600

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENTRY_KEYS = frozenset({"bridge_url", "secrets", "token"})

T = TypeVar("T")


class RegistryError(IrisError):
    """``agents.json`` exists but is unusable (bad JSON, wrong shape, invalid entry)."""

    code = "registry_invalid"
    status = 500


class AgentExists(IrisError):
    """A new agent's name is taken."""

    code = "agent_exists"
    status = 409


class _Invalid(ValueError):
    """A validation problem, turned into InvalidInput (arguments) or RegistryError (file)."""


@dataclass(frozen=True)
class AgentEntry:
    """One registered sub-agent."""

    name: str
    bridge_url: str
    secrets: tuple[str, ...] = ()
    token: str | None = None

    def __repr__(self) -> str:
        # The token must never reach a log line through a repr.
        token = "None" if self.token is None else "'****'"
        return (
            f"AgentEntry(name={self.name!r}, bridge_url={self.bridge_url!r}, "
            f"secrets={self.secrets!r}, token={token})"
        )

    def to_json(self) -> dict[str, object]:
        """The value stored under :attr:`name` in ``agents.json`` (no token key when unset)."""
        out: dict[str, object] = {"bridge_url": self.bridge_url, "secrets": list(self.secrets)}
        if self.token is not None:
            out["token"] = self.token
        return out


# -- validation ------------------------------------------------------------------------------


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise _Invalid(
            f"invalid agent name {name!r}: use 1-63 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise _Invalid(f"bridge_url must be a string, not {type(url).__name__}")
    # urlsplit silently drops some whitespace/control characters; refuse them outright.
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise _Invalid("bridge_url must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a non-numeric or out-of-range port)
    except ValueError as exc:
        raise _Invalid(f"bridge_url {url!r} is not a valid URL: {exc}") from None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        # Do not echo the URL: it carries a credential.
        raise _Invalid("bridge_url must not contain credentials (user:password@)")
    if parts.scheme not in ("http", "https"):
        raise _Invalid(f"bridge_url {url!r} must start with http:// or https://")
    if not parts.hostname:
        raise _Invalid(f"bridge_url {url!r} has no host")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise _Invalid(f"bridge_url {url!r} must not have a query or fragment")
    return url


def _check_secrets(secrets: object) -> tuple[str, ...]:
    # A bare string is iterable too; "ABC" must not become ("A", "B", "C").
    if isinstance(secrets, (str, bytes)) or not isinstance(secrets, Iterable):
        raise _Invalid("secrets must be a list of secret names")
    out: list[str] = []
    for item in secrets:
        if not isinstance(item, str) or not SECRET_NAME_RE.fullmatch(item):
            raise _Invalid(
                f"invalid secret name {item!r}: use letters, digits, '_', '.', '-' "
                "(max 128), starting with a letter or '_'"
            )
        if item not in out:
            out.append(item)
    return tuple(out)


def _check_token(token: object) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str) or not token:
        raise _Invalid("token must be a non-empty string")
    # The token travels in an HTTP header; a control character there is a bug or an injection.
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in token) or token != token.strip():
        raise _Invalid("token must not contain control characters or surrounding whitespace")
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, e.g. from "\ud800" in the JSON
        raise _Invalid("token must be valid Unicode text") from None
    return token


def _token_owner(entries: dict[str, AgentEntry], token: str | None, *, besides: str) -> str | None:
    """The name of another entry (not ``besides``) whose token is ``token``."""
    if token is None:
        return None
    wanted = token.encode("utf-8")
    for other in entries.values():
        if other.name == besides or other.token is None:
            continue
        if hmac.compare_digest(other.token.encode("utf-8"), wanted):
            return other.name
    return None


def _merge(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    return old + tuple(s for s in new if s not in old)


# -- the registry ----------------------------------------------------------------------------


class AgentRegistry:
    """``agents.json`` at ``path``. Stateless: every call reads the file, so it always sees
    writes made by other processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"AgentRegistry({str(self.path)!r})"

    # -- reading --------------------------------------------------------------------------

    def load(self) -> dict[str, AgentEntry]:
        """Every entry, sorted by name; an empty dict when the file does not exist."""
        try:
            # Open once and read the descriptor: a concurrent os.replace swaps the name, not
            # the bytes we are reading, so there is no window for a torn read.
            with self.path.open("rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        return self._parse(raw)

    def _parse(self, raw: bytes) -> dict[str, AgentEntry]:
        def reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
            seen: dict[str, object] = {}
            for key, value in pairs:
                if key in seen:
                    raise _Invalid(f"duplicate key {key!r}")
                seen[key] = value
            return seen

        try:
            data: object = json.loads(raw.decode("utf-8"), object_pairs_hook=reject_duplicates)
        except UnicodeDecodeError:
            raise RegistryError(f"{self.path}: not valid UTF-8") from None
        except _Invalid as exc:
            raise RegistryError(f"{self.path}: invalid: {exc}") from None
        except json.JSONDecodeError as exc:
            # The decoder's message has a position only, never the file's content.
            raise RegistryError(f"{self.path}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RegistryError(
                f"{self.path}: must be a JSON object of agent entries, not {type(data).__name__}"
            )
        entries: dict[str, AgentEntry] = {}
        for name in sorted(data):
            try:
                entries[name] = self._entry_from_json(name, data[name])
            except _Invalid as exc:
                raise RegistryError(f"{self.path}: agent {name!r}: {exc}") from None
        return entries

    @staticmethod
    def _entry_from_json(name: str, value: object) -> AgentEntry:
        _check_name(name)
        if not isinstance(value, dict):
            raise _Invalid(f"entry must be a JSON object, not {type(value).__name__}")
        unknown = sorted(set(value) - ENTRY_KEYS)
        if unknown:
            raise _Invalid(
                f"unknown key(s) {', '.join(map(repr, unknown))} "
                f"(allowed: {', '.join(sorted(ENTRY_KEYS))})"
            )
        if "bridge_url" not in value:
            raise _Invalid("missing bridge_url")
        secrets = value.get("secrets", [])
        if not isinstance(secrets, list):
            raise _Invalid("secrets must be a list of secret names")
        return AgentEntry(
            name=name,
            bridge_url=_check_url(value["bridge_url"]),
            secrets=_check_secrets(secrets),
            token=_check_token(value.get("token")),
        )

    def get(self, name: str) -> AgentEntry | None:
        _argument(_check_name, name)
        return self.load().get(name)

    def names(self) -> list[str]:
        return sorted(self.load())

    def find_by_token(self, presented: str) -> AgentEntry | None:
        """The agent whose token is ``presented``, or None.

        SHA-256 digests are compared, not the tokens: equal-length inputs keep
        ``compare_digest`` constant-time whatever the presented length. Every entry is compared,
        even after a match, so the time taken does not tell a caller how far down the registry
        its guess got. If two entries share a token (only possible by hand-editing; ``register``
        refuses it) the first by name wins.
        """
        if not presented:
            return None
        wanted = token_digest(presented)
        found: AgentEntry | None = None
        for entry in self.load().values():
            if entry.token is None:
                continue
            if hmac.compare_digest(wanted, token_digest(entry.token)) and found is None:
                found = entry
        return found

    # -- writing --------------------------------------------------------------------------

    def register(
        self,
        name: str,
        bridge_url: str,
        secrets: Iterable[str] = (),
        token: str | None = None,
        *,
        merge_secrets: bool = True,
    ) -> AgentEntry:
        """Add ``name``, or update it: the URL is replaced, the secrets merged (union, order
        kept) unless ``merge_secrets`` is False, and an existing token kept unless a new one is
        given."""
        name = _argument(_check_name, name)
        bridge_url = _argument(_check_url, bridge_url)
        wanted = _argument(_check_secrets, secrets)
        token = _argument(_check_token, token)
        with self._locked():
            entries = self.load()  # raises on a corrupt file before anything is written
            old = entries.get(name)
            if old is not None:
                if merge_secrets:
                    wanted = _merge(old.secrets, wanted)
                if token is None:
                    token = old.token
            owner = _token_owner(entries, token, besides=name)
            if owner is not None:
                # One token, one identity: find_by_token must never have to pick.
                raise InvalidInput(f"agent {owner!r} already uses this token; each needs its own")
            entry = AgentEntry(name=name, bridge_url=bridge_url, secrets=wanted, token=token)
            entries[name] = entry
            self._write(entries)
        return entry

    def add(
        self,
        name: str,
        choose_url: Callable[[dict[str, AgentEntry]], str],
        secrets: Iterable[str] = (),
        token: str | None = None,
    ) -> AgentEntry:
        """Register a new agent, refusing a name that is taken. ``choose_url`` gets the current
        entries and picks the bridge URL while the lock is held, so two concurrent spawns can
        never be given the same port."""
        name = _argument(_check_name, name)
        wanted = _argument(_check_secrets, secrets)
        token = _argument(_check_token, token)
        with self._locked():
            entries = self.load()
            if name in entries:
                raise AgentExists(f"an agent named {name!r} is already registered in {self.path}")
            owner = _token_owner(entries, token, besides=name)
            if owner is not None:
                raise InvalidInput(f"agent {owner!r} already uses this token; each needs its own")
            bridge_url = _argument(_check_url, choose_url(entries))
            entry = AgentEntry(name=name, bridge_url=bridge_url, secrets=wanted, token=token)
            entries[name] = entry
            self._write(entries)
        return entry

    def unregister(self, name: str) -> bool:
        """Remove ``name``; False when it was not registered (the file is then left alone)."""
        name = _argument(_check_name, name)
        with self._locked():
            entries = self.load()
            if name not in entries:
                return False
            del entries[name]
            self._write(entries)
        return True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with file_lock(self.lock_path):
            yield

    def _write(self, entries: dict[str, AgentEntry]) -> None:
        """Atomically replace the file. Caller holds the lock."""
        payload = {name: entries[name].to_json() for name in sorted(entries)}
        write_private_file(self.path, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))


def token_digest(token: str) -> bytes:
    # surrogatepass: a presented header value must never raise while being compared.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _argument(check: Callable[[object], T], value: object) -> T:
    """Run a validator on a caller's argument: a problem is the caller's (InvalidInput)."""
    try:
        return check(value)
    except _Invalid as exc:
        raise InvalidInput(str(exc)) from None


def registry_for(settings: Settings) -> AgentRegistry:
    """The registry of the Iris configured by ``settings``."""
    return AgentRegistry(settings.data_dir / REGISTRY_FILE_NAME)

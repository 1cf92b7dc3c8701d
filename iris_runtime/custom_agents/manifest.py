"""A custom agent's manifest (spec 004, "The manifest"): one strict JSON object per file.

Strict so that a typo never silently does nothing: every rule of the spec's *Strictness*
paragraph rejects the file with a :class:`ManifestError` whose message is the reason logged and
listed (``agent manifest <path> skipped: <reason>``). Both shapes are validated here, ACP
(``bin``) and relay (``relay``), whichever of them this Iris can run.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

SUPPORTED_CONTRACTS = (1,)
MAX_MANIFEST_BYTES = 64 * 1024
# A kind is what follows "@" in a message, so it has the shape of a mention (bridge.mentions).
KIND_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# Names a kind may never take: Iris herself, and words chat platforms already give a meaning to
# after "@" (Slack's @channel/@here/@everyone), so "@here …" never reaches an agent by accident.
RESERVED_KINDS = frozenset({"iris", "all", "channel", "here", "everyone", "subagents", "agents"})

COMMON_FIELDS = frozenset({"kind", "label"})
ACP_FIELDS = frozenset({"bin", "args", "models", "modelEnv"})
RELAY_FIELDS = frozenset({"relay", "contract", "commands", "auth", "setup"})


class ManifestError(ValueError):
    """The file is rejected; ``str(error)`` is the reason, in the spec's words where it has some."""


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    arg_hint: str | None = None


@dataclass(frozen=True)
class Model:
    id: str
    label: str | None = None


@dataclass(frozen=True)
class Provider:
    id: str
    label: str
    note: str


@dataclass(frozen=True)
class AuthProbe:
    """Signed in when ``file`` exists and (if given) contains ``contains``."""

    file: str
    contains: str | None = None


@dataclass(frozen=True)
class Setup:
    login: tuple[str, ...]  # argv; "{provider}" is replaced by the chosen provider's id
    providers: tuple[Provider, ...]


@dataclass(frozen=True)
class Manifest:
    kind: str
    label: str
    shape: str  # "relay" | "acp"
    relay: str | None = None
    contract: int = 1
    commands: tuple[Command, ...] = ()
    auth: AuthProbe | None = None
    setup: Setup | None = None
    bin: str | None = None
    args: tuple[str, ...] = ()
    models: tuple[Model, ...] = ()
    model_env: str | None = None


def parse_manifest(data: bytes, reserved: Collection[str] = ()) -> Manifest:
    """The manifest in ``data``, or :class:`ManifestError` naming the first rule it breaks.

    ``reserved`` holds names taken elsewhere (registered bridge sub-agents), refused like the
    built-in reserved kinds."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"the file is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        raw = json.loads(data, object_pairs_hook=_no_duplicates)
    except ManifestError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ManifestError("the file must hold one JSON object")
    _no_unknown(raw, COMMON_FIELDS | ACP_FIELDS | RELAY_FIELDS, "")
    kind = _kind(raw, reserved)
    label = _string(raw, "label") if "label" in raw else kind
    has_bin, has_relay = "bin" in raw, "relay" in raw
    if has_bin == has_relay:
        raise ManifestError('give exactly one of "bin" (an ACP agent) and "relay" (a relay agent)')
    if has_relay:
        return _relay(raw, kind, label)
    return _acp(raw, kind, label)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A key given twice is refused: JSON would silently keep the last, hiding a typo."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise ManifestError(f'duplicate key "{key}"')
        value[key] = item
    return value


def reserved_reason(kind: str) -> str:
    return f'"kind" {kind!r} is already the name of a registered sub-agent'


def _kind(raw: dict[str, Any], reserved: Collection[str]) -> str:
    if "kind" not in raw:
        raise ManifestError('"kind" is required')
    kind = raw["kind"]
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise ManifestError(
            '"kind" must be 1-63 lowercase letters, digits, "-" or "_", starting with a letter '
            "or digit"
        )
    if kind in RESERVED_KINDS:
        raise ManifestError(f'"kind" {kind!r} is reserved')
    if kind in reserved:
        raise ManifestError(reserved_reason(kind))
    return kind


def _relay(raw: dict[str, Any], kind: str, label: str) -> Manifest:
    misplaced = sorted(ACP_FIELDS & raw.keys())
    if misplaced:
        raise ManifestError(f'{_names(misplaced)} cannot be used together with "relay"')
    url = raw["relay"]
    if not isinstance(url, str) or not _loopback_http(url):
        raise ManifestError('"relay" must be a loopback http URL')
    contract = raw.get("contract", 1)
    if not isinstance(contract, int) or isinstance(contract, bool):
        raise ManifestError('"contract" must be an integer')
    if contract not in SUPPORTED_CONTRACTS:
        supported = ", ".join(str(v) for v in SUPPORTED_CONTRACTS)
        raise ManifestError(
            f"relay contract {contract} is not supported by this machine (supports: {supported})"
        )
    return Manifest(
        kind,
        label,
        "relay",
        relay=url,
        contract=contract,
        commands=_commands(raw.get("commands", [])),
        auth=_auth(raw["auth"]) if "auth" in raw else None,
        setup=_setup(raw["setup"]) if "setup" in raw else None,
    )


def _acp(raw: dict[str, Any], kind: str, label: str) -> Manifest:
    misplaced = sorted((RELAY_FIELDS - {"relay"}) & raw.keys())
    if misplaced:
        raise ManifestError(f'{_names(misplaced)} cannot be used together with "bin"')
    binary = raw["bin"]
    if not isinstance(binary, str) or not binary.startswith("/"):
        raise ManifestError('"bin" must be an absolute path')
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ManifestError('"args" must be an array of strings')
    if "modelEnv" in raw and "models" not in raw:
        raise ManifestError('"modelEnv" needs "models"')
    model_env = _string(raw, "modelEnv") if "modelEnv" in raw else None
    models = _models(raw["models"]) if "models" in raw else ()
    return Manifest(
        kind, label, "acp", bin=binary, args=tuple(args), models=models, model_env=model_env
    )


def _models(value: Any) -> tuple[Model, ...]:
    if not isinstance(value, list):
        raise ManifestError('"models" must be an array')
    if not value:
        raise ManifestError('"models" must not be empty')
    models = []
    for item in value:
        entry = _object(item, "models[]", {"id"}, {"label"})
        model_id = _string(entry, "id")
        if any(c.isspace() for c in model_id):  # `/model <id>` takes one word
            raise ManifestError('"models[].id" must not contain whitespace')
        if model_id.lower() == "default":  # `/model default` goes back to the agent's own
            raise ManifestError(
                '"models[].id" must not be "default" (it means the agent\'s own default)'
            )
        models.append(Model(model_id, _string(entry, "label") if "label" in entry else None))
    return tuple(models)


def _commands(value: Any) -> tuple[Command, ...]:
    if not isinstance(value, list):
        raise ManifestError('"commands" must be an array')
    commands = []
    for item in value:
        entry = _object(item, "commands[]", {"name", "description"}, {"argHint"})
        hint = _string(entry, "argHint") if "argHint" in entry else None
        commands.append(Command(_string(entry, "name"), _string(entry, "description"), hint))
    return tuple(commands)


def _auth(value: Any) -> AuthProbe:
    entry = _object(value, "auth", {"file"}, {"contains"})
    path = _string(entry, "file")
    if not path.startswith("/"):
        raise ManifestError('"auth.file" must be an absolute path')
    return AuthProbe(path, _string(entry, "contains") if "contains" in entry else None)


def _setup(value: Any) -> Setup:
    entry = _object(value, "setup", {"login", "providers"}, set())
    login = entry["login"]
    if not isinstance(login, list) or not login or not all(isinstance(a, str) for a in login):
        raise ManifestError('"setup.login" must be a non-empty array of strings')
    if not login[0].startswith("/"):
        raise ManifestError('"setup.login" must start with an absolute path')
    providers = entry["providers"]
    if not isinstance(providers, list) or not providers:
        raise ManifestError('"setup.providers" must be a non-empty array')
    parsed = []
    for item in providers:
        p = _object(item, "setup.providers[]", {"id", "label", "note"}, set())
        parsed.append(Provider(_string(p, "id"), _string(p, "label"), _string(p, "note")))
    return Setup(tuple(login), tuple(parsed))


def _object(
    value: Any, where: str, required: Collection[str], optional: Collection[str]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f'"{where}" must be an object')
    _no_unknown(value, {*required, *optional}, where + ".")
    missing = sorted(set(required) - value.keys())
    if missing:
        raise ManifestError(f'"{where}" needs {_names(missing)}')
    return value


def _no_unknown(value: dict[str, Any], known: Collection[str], prefix: str) -> None:
    unknown = sorted(k for k in value if k not in known)
    if unknown:
        raise ManifestError(f'unknown field "{prefix}{unknown[0]}"')


def _string(value: dict[str, Any], name: str) -> str:
    text = value[name]
    if not isinstance(text, str) or not text.strip():
        raise ManifestError(f'"{name}" must be a non-empty string')
    return text


def _names(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _loopback_http(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError:
        return False
    if parts.scheme != "http" or not host or parts.username or parts.password:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

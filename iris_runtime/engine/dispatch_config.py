"""``channels.json``: the channel modes of :mod:`iris_runtime.engine.dispatch`, strictly read.

Shape::

    {"C0123ABC": {"mode": "thread"},
     "C0ADMIN1": {"mode": "admin", "admins": ["U0123ABC"]},
     "C0RELAY01": {"mode": "passthrough", "agent": "helper"},
     "defaults": {"mode": "thread"}}

Keys are Iris channel ids (``defaults`` covers group channels without an entry); ``admins`` are
the platform's user ids as strings. Anything else is an error: an unknown field or mode, a
duplicate key, a missing ``agent`` for ``passthrough`` or ``admins`` for ``admin``, a field a
mode does not use. Whether a passthrough's agent exists is not part of the file's validity
(agents come and go; the relay answers "not available"): :func:`missing_agents` reports it, as a
warning of ``iris doctor``.

:class:`ChannelModes` is what a running Iris asks on every message: it re-reads the file when it
changes (no restart), and a bad file is logged and kept as the :attr:`ChannelModes.problem` while
the previous good configuration stays in force (Iris never stops over it). Until a good file has
loaded, a rejected file fails closed: the channels it lists (every channel, when it cannot even
be read as an object) are ignored, never given their usual behaviour.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from iris_runtime.engine.channels import resolve_channel_dir, validate_channel_id
from iris_runtime.engine.dispatch import (
    MODES,
    THREAD_SEPARATOR,
    ChannelRule,
    Decision,
    DispatchConfig,
    InboundMessage,
    conversation_key,
    resolve_dispatch,
)
from iris_runtime.engine.filecache import signature
from iris_runtime.engine.sessions import LOG_NAME
from iris_runtime.errors import ConfigError, InvalidInput

log = logging.getLogger(__name__)

DEFAULTS_KEY = "defaults"
FIELDS = frozenset({"mode", "admins", "agent"})
MAX_FILE_BYTES = 1 << 20
MAX_ADMINS = 1000
MAX_USER_ID = 128
AgentNames = Callable[[], Collection[str]]
_NEVER = object()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


def parse_channels(text: str) -> DispatchConfig:
    """The configuration in ``text``, or :class:`ConfigError` naming the first problem."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    if not isinstance(data, dict):
        raise ConfigError("the top level must be an object of channel ids")
    channels: dict[str, ChannelRule] = {}
    defaults = None
    for key, value in data.items():
        if key == DEFAULTS_KEY:
            defaults = _rule(value, DEFAULTS_KEY)
            continue
        try:
            validate_channel_id(key)
        except InvalidInput as exc:
            raise ConfigError(f"{key[:80]!r}: {exc.message}") from exc
        if THREAD_SEPARATOR in key:
            raise ConfigError(f"{key[:80]!r}: a channel id, not a thread ('@' is not allowed)")
        channels[key] = _rule(value, key)
    return DispatchConfig(MappingProxyType(channels), defaults)


def missing_agents(config: DispatchConfig, agent_names: AgentNames) -> list[str]:
    """The agents the passthroughs name that ``agent_names`` does not know (asked only when a
    passthrough names one)."""
    wanted = config.agents()
    if not wanted:
        return []
    return sorted(wanted - set(agent_names()))


def held_back(text: str | None) -> DispatchConfig:
    """What a rejected file fails closed to while no good file has loaded: the channels it
    lists (as far as it can be read) are ignored; every channel when it names none readably."""
    try:
        data = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return DispatchConfig(hold_rest="all")
    held = frozenset(k for k in data if isinstance(k, str) and k != DEFAULTS_KEY)
    return DispatchConfig(held=held, hold_rest="groups" if DEFAULTS_KEY in data else None)


def _rule(value: Any, where: str) -> ChannelRule:
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: must be an object such as {{"mode": "thread"}}')
    unknown = sorted(set(value) - FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    mode = value.get("mode")
    if mode not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)} (got {mode!r})")
    admins = value.get("admins")
    agent = value.get("agent")
    if mode == "admin":
        if not isinstance(admins, list) or not admins or len(admins) > MAX_ADMINS:
            raise ConfigError(f'{where}: admin mode needs "admins", a list of user ids')
        for admin in admins:
            if not isinstance(admin, str) or not admin.strip() or len(admin) > MAX_USER_ID:
                raise ConfigError(f"{where}: admins are user ids as strings, got {admin!r}")
    elif admins is not None:
        raise ConfigError(f'{where}: "admins" applies to admin mode only')
    if mode == "passthrough":
        if not isinstance(agent, str) or not agent.strip():
            raise ConfigError(f'{where}: passthrough needs "agent", the agent\'s name')
        agent = agent.strip().lstrip("@").lower()
    elif agent is not None:
        raise ConfigError(f'{where}: "agent" applies to passthrough mode only')
    return ChannelRule(mode, frozenset(a.strip() for a in admins or ()), agent)


def read_text(path: Path) -> str | None:
    """The file's text (None when it does not exist); ConfigError when it cannot be read.
    Opened without blocking and checked to be a regular file: a FIFO must not hang Iris."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} is not a regular file")
        try:
            raw = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("not UTF-8 text") from exc


def read_channels(path: Path) -> DispatchConfig:
    """The file's configuration (empty when it does not exist); ConfigError when it is bad."""
    text = read_text(path)
    return DispatchConfig() if text is None else parse_channels(text)


class ChannelModes:
    """The configuration in force, re-read when ``channels.json`` changes."""

    def __init__(self, path: Path, data_dir: Path) -> None:
        self.path = path
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._config = DispatchConfig()
        self._loaded = False  # a good file (or no file) has been read since start-up
        self._seen: object = _NEVER  # what the file was when last read (None: absent)
        self.problem: str | None = None  # why the file on disk is not in force

    def current(self) -> DispatchConfig:
        """The configuration in force (one ``stat`` when the file has not changed, whether it
        was taken or rejected)."""
        sig = signature(self.path)
        with self._lock:
            if sig == self._seen:
                return self._config
            return self._load(sig)

    def reload(self) -> DispatchConfig:
        """Read the file now, whatever its state; the problem, if any, is in :attr:`problem`."""
        with self._lock:
            return self._load(signature(self.path))

    def _load(self, sig: object) -> DispatchConfig:
        text: str | None = None
        try:
            text = read_text(self.path)
            config = DispatchConfig() if text is None else parse_channels(text)
        except ConfigError as exc:
            if self._loaded:
                kept = "the previous configuration stays in force"
            else:  # fail closed: what it lists must not fall back to its usual behaviour
                kept = "the channels it lists are ignored until it is fixed"
                self._config = held_back(text)
            problem = f"{self.path}: {exc.message}; {kept}"
            if problem != self.problem:
                log.error("channels.json is not valid: %s", problem)
            self.problem = problem
            self._seen = sig
            return self._config
        if self.problem is not None or config != self._config:
            log.info(
                "channels.json: %d channel(s) configured%s",
                len(config.channels),
                f", defaults {config.defaults.mode}" if config.defaults else "",
            )
        self._config, self.problem, self._seen, self._loaded = config, None, sig, True
        return config

    def decide(self, inbound: InboundMessage) -> Decision:
        """:func:`resolve_dispatch` over the configuration in force, knowing whether Iris has
        already answered in the message's thread (its conversation has a log)."""
        config = self.current()
        rule = config.rule_for(inbound.channel, direct=inbound.direct)
        if (
            rule is not None
            and rule.mode == "interactive-thread"
            and inbound.thread is not None
            and not inbound.thread_answered
            and self.answered(conversation_key(inbound.channel, inbound.thread))
        ):
            inbound = replace(inbound, thread_answered=True)
        return resolve_dispatch(inbound, config)

    def answered(self, conversation: str) -> bool:
        """Whether Iris has run in this conversation (its log exists); durable over restarts."""
        try:
            directory = resolve_channel_dir(self._data_dir, conversation)
        except InvalidInput:
            return False
        return os.path.exists(directory / LOG_NAME)

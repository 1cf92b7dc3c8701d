"""``channels.json``: the channel modes of :mod:`iris_runtime.engine.dispatch`, strictly read.

Shape::

    {"C0123ABC": {"mode": "thread"},
     "C0ADMIN1": {"mode": "admin", "admins": ["U0123ABC"]},
     "C0RELAY01": {"mode": "passthrough", "agent": "helper"},
     "defaults": {"mode": "thread"}}

Keys are Iris channel ids (``defaults`` covers group channels without an entry); ``admins`` are
the platform's user ids as strings. Anything else is an error: an unknown field or mode, a
missing ``agent`` for ``passthrough`` or ``admins`` for ``admin``, a field a mode does not use,
an agent that is neither a registered sub-agent nor a loaded custom agent.

:class:`ChannelModes` is what a running Iris asks on every message: it re-reads the file when it
changes (no restart), and a bad file is logged and kept as the :attr:`ChannelModes.problem` while
the previous good configuration stays in force (Iris never stops over it).
"""

from __future__ import annotations

import json
import logging
import os
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


def parse_channels(text: str, agent_names: AgentNames | None = None) -> DispatchConfig:
    """The configuration in ``text``, or :class:`ConfigError` naming the first problem.
    ``agent_names`` (the agents a passthrough may name) is asked only if one names an agent;
    None skips that check."""
    try:
        data = json.loads(text)
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
    config = DispatchConfig(MappingProxyType(channels), defaults)
    wanted = config.agents()
    if wanted and agent_names is not None:
        known = set(agent_names())
        unknown = sorted(wanted - known)
        if unknown:
            have = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"unknown agent(s) {', '.join(unknown)}: a passthrough names a registered "
                f"sub-agent or a loaded custom agent (known: {have})"
            )
    return config


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
                raise ConfigError(
                    f"{where}: admins are user ids as strings (numeric ids in decimal), "
                    f"got {admin!r}"
                )
    elif admins is not None:
        raise ConfigError(f'{where}: "admins" applies to admin mode only')
    if mode == "passthrough":
        if not isinstance(agent, str) or not agent.strip():
            raise ConfigError(f'{where}: passthrough needs "agent", the agent\'s name')
        agent = agent.strip().lstrip("@").lower()
    elif agent is not None:
        raise ConfigError(f'{where}: "agent" applies to passthrough mode only')
    return ChannelRule(mode, frozenset(admins or ()), agent)


def read_channels(path: Path, agent_names: AgentNames | None = None) -> DispatchConfig:
    """The file's configuration (empty when it does not exist); ConfigError when it is bad."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return DispatchConfig()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("not UTF-8 text") from exc
    return parse_channels(text, agent_names)


class ChannelModes:
    """The configuration in force, re-read when ``channels.json`` changes."""

    def __init__(self, path: Path, data_dir: Path) -> None:
        self.path = path
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._agent_names: AgentNames | None = None
        self._config = DispatchConfig()
        self._seen: object = None  # what the file was when last read
        self.problem: str | None = None  # why the file on disk is not in force

    def set_agent_names(self, names: AgentNames) -> None:
        """Where passthrough agents are checked (set by the runtime once agents are known)."""
        with self._lock:
            self._agent_names = names
            self._seen = None  # check the file again against them

    def current(self) -> DispatchConfig:
        """The configuration in force (one ``stat`` when the file has not changed)."""
        sig = signature(self.path)
        with self._lock:
            # A rejected file is looked at again every time: the agent it names may have been
            # registered since, which changes nothing on disk.
            if sig == self._seen and self.problem is None:
                return self._config
            return self._load(sig)

    def reload(self) -> DispatchConfig:
        """Read the file now, whatever its state; the problem, if any, is in :attr:`problem`."""
        with self._lock:
            return self._load(signature(self.path))

    def _load(self, sig: object) -> DispatchConfig:
        try:
            config = read_channels(self.path, self._agent_names)
        except ConfigError as exc:
            problem = f"{self.path}: {exc.message}; the previous configuration stays in force"
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
        self._config, self.problem, self._seen = config, None, sig
        return config

    def decide(self, inbound: InboundMessage) -> Decision:
        """:func:`resolve_dispatch` over the configuration in force, knowing whether Iris has
        already answered in the message's thread (its conversation has a log)."""
        if inbound.thread is not None and not inbound.thread_answered:
            answered = self.answered(conversation_key(inbound.channel, inbound.thread))
            if answered:
                inbound = replace(inbound, thread_answered=True)
        return resolve_dispatch(inbound, self.current())

    def answered(self, conversation: str) -> bool:
        """Whether Iris has run in this conversation (its log exists); durable over restarts."""
        try:
            directory = resolve_channel_dir(self._data_dir, conversation)
        except InvalidInput:
            return False
        return os.path.exists(directory / LOG_NAME)

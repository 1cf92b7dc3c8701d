"""The data dir's layout: every top-level entry Iris and its shipped plugins put in IRIS_DATA_DIR.

Channel folders (``<channel id>/``) live beside these entries, so none of these names may ever be
a channel id: :func:`iris_runtime.engine.channels.validate_channel_id` refuses every name in
:data:`TOP_LEVEL`. It refuses them case-insensitively: on Linux ``constitution.md`` and
``CONSTITUTION.md`` are different files, but a data dir on a case-insensitive filesystem (macOS,
some mounts) would alias them, and no transport's channel ids look like these names anyway.

A feature that creates a top-level entry names it here and builds its path from the constant
(``settings.data_dir / data_layout.AUDIT_DIR``); ``tests/test_data_layout.py`` fails on a
``data_dir / "literal"`` anywhere else, so a new feature cannot forget to reserve its name.
The workspace is the data dir too, so files the agent's own tools create there are not listed:
they are the agent's, not Iris's.

This module imports nothing from Iris: the engine, the plugins and the CLI all read it.
"""

from __future__ import annotations

# -- Iris's own files ------------------------------------------------------------------------
API_TOKEN = "api-token"  # noqa: S105 (a file name: the internal API's shared token, 0600)
AGENTS_JSON = "agents.json"  # the sub-agent registry
AGENTS_JSON_LOCK = AGENTS_JSON + ".lock"  # its flock, never deleted
AGENTS_DIR = "agents"  # default homes of spawned agents (IRIS_AGENTS_DIR)
AGENTS_D = "agents.d"  # custom-agent manifests (spec 004)
AUDIT_DIR = "audit"  # audit/secrets.jsonl
BRIDGE_JOBS_DIR = "bridge-jobs"  # per-request event logs of the bridge
CHANNELS_JSON = "channels.json"  # channel modes (spec 003)
CUSTOM_AGENTS_DIR = "custom-agents"  # custom agents' chats (chat ids, relay sessions)
EVENTS_DIR = "events"  # event files of every channel; <transport>/events/ for one transport's
MODELS_YAML = "models.yaml"  # the models table's local override
RUN_DIR = "run"  # sockets and locks: gunicorn control, supervisor, Web UI login key
SECRETS_DIR = "secrets"  # the file secret store and Vault identity records
SESSION_AGENTS_JSON = "session-agents.json"  # in-process agent ids and sub-agent settings
SESSION_AGENTS_DIR = "session-agents"  # default folders of in-process agent ids
STATE_DB = "state.db"  # SQLite: event firings, supervised processes, sub-agent runs
TERRAFORM_DIR = "terraform"  # Docker agents' Terraform work and state
WORK_DIR = "work"  # the work folder a sandboxed command sees as /workspace (tools/sandbox)

# SQLite writes these next to the database (WAL mode, or a rollback journal).
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")

# -- the agent's identity, memory and skills (the data dir is its workspace) -------------------
CONSTITUTION_MD = "CONSTITUTION.md"
MEMORY_MD = "MEMORY.md"
AGENTS_MD = "AGENTS.md"  # main's instructions for the sub-agents it spawns (spec 001)
TOOLS_MD = "TOOLS.md"  # ... and its notes on their tools
AUTH_PROFILES_JSON = "auth-profiles.json"  # an agent id's own provider keys (0600)
SKILLS_DIR = "skills"

# -- the shipped transports' own folders, named for their transport ids ----------------------
# Reserved whether or not the transport is installed: a data dir outlives a plugin.
SLACK_DIR = "slack"  # slack/events/
TELEGRAM_DIR = "telegram"  # telegram/events/, polling offsets
WEBUI_DIR = "webui"  # the Web UI's login sessions

TOP_LEVEL: frozenset[str] = frozenset(
    {
        API_TOKEN,
        AGENTS_JSON,
        AGENTS_JSON_LOCK,
        AGENTS_DIR,
        AGENTS_D,
        AUDIT_DIR,
        BRIDGE_JOBS_DIR,
        CHANNELS_JSON,
        CUSTOM_AGENTS_DIR,
        EVENTS_DIR,
        MODELS_YAML,
        RUN_DIR,
        SECRETS_DIR,
        SESSION_AGENTS_JSON,
        SESSION_AGENTS_DIR,
        STATE_DB,
        *(STATE_DB + suffix for suffix in SQLITE_SIDECARS),
        TERRAFORM_DIR,
        WORK_DIR,
        CONSTITUTION_MD,
        MEMORY_MD,
        AGENTS_MD,
        TOOLS_MD,
        AUTH_PROFILES_JSON,
        SKILLS_DIR,
        SLACK_DIR,
        TELEGRAM_DIR,
        WEBUI_DIR,
    }
)
_RESERVED_FOLDED = frozenset(name.casefold() for name in TOP_LEVEL)
# Folders named at run time: every loaded transport that claims channels gets ``<id>/events/``
# (third-party ones too, which cannot add themselves to TOP_LEVEL). See reserve_folder.
_RESERVED_AT_RUN_TIME: set[str] = set()


def reserve_folder(name: str) -> None:
    """Refuse ``name`` as a channel id from now on: a loaded plugin keeps a folder of that name
    at the top of the data dir. Call it before channels are resolved (the runtime does, for
    every transport, when it assembles the engine)."""
    _RESERVED_AT_RUN_TIME.add(name.casefold())


def is_reserved(name: str) -> bool:
    """Whether ``name`` (in any case) is one of the data dir's own top-level entries."""
    folded = name.casefold()
    return folded in _RESERVED_FOLDED or folded in _RESERVED_AT_RUN_TIME

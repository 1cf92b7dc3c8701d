"""The Unix user of each systemd sub-agent: one per agent, so no agent can read another's files
even through a mistake in a mode bit.

The user is ``<prefix>-<agent name>`` (prefix ``IRIS_AGENT_USER``, ``iris-agent`` by default);
a name too long for the 32 characters of a user name is cut and given a hash suffix of the whole
name. Each user is a system user with its own group, no home and no login shell, and carries
``Iris sub-agent <name>`` as its comment. That comment is checked before a user is used: a user
of the same name that belongs to someone else (an operator's account, or another agent whose
name happened to cut to the same text) is never taken over.

Users are kept when their agent is removed: the archived home keeps an owner, and the agent
comes back under the same uid if its name is spawned again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import Progress

USER_NAME_MAX = 32  # useradd's limit (and utmp's)
# Agent users are kept after their agent goes; past this many, no new one is made (the system
# uid range, ~900 on Debian, is shared with every package's users).
MAX_AGENT_USERS = 512
_HASH_CHARS = 8
COMMENT_PREFIX = "Iris sub-agent "

Run = Callable[..., subprocess.CompletedProcess[str]]


def agent_user_name(prefix: str, agent: str) -> str:
    """``iris-agent-digest``; a long name becomes ``iris-agent-<cut>-<8 hex of its hash>``."""
    whole = f"{prefix}-{agent}"
    if len(whole) <= USER_NAME_MAX:
        return whole
    digest = hashlib.sha256(agent.encode()).hexdigest()[:_HASH_CHARS]
    keep = USER_NAME_MAX - len(prefix) - _HASH_CHARS - 2
    if keep < 1:
        raise ProvisionError(
            f"IRIS_AGENT_USER {prefix!r} is too long to prefix agent user names "
            f"(at most {USER_NAME_MAX - _HASH_CHARS - 3} characters)"
        )
    return f"{prefix}-{agent[:keep].rstrip('-_')}-{digest}"


def comment_for(agent: str) -> str:
    return f"{COMMENT_PREFIX}{agent}"


def ensure_agent_user(run: Run, agent: str, user: str, progress: Progress) -> None:
    """Create ``user`` for ``agent`` when it is missing (as root); refuse one that exists but
    belongs to someone else."""
    found = run("getent", "passwd", user, check=False)
    if found.returncode == 0:
        _check_owner(found.stdout, agent, user)
        return
    if os.geteuid() != 0:
        raise ProvisionError(
            f"the agent user {user!r} does not exist and only root can create it "
            "(service mode runs as root)"
        )
    if _agent_users(run) >= MAX_AGENT_USERS:
        raise ProvisionError(
            f"there are {MAX_AGENT_USERS} agent users on this host already (users whose comment "
            f"starts {COMMENT_PREFIX.strip()!r}): delete those of agents that are gone "
            "(userdel) before making more"
        )
    progress(f"creating the system user {user}")
    created = run(
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/",
        "--shell",
        "/usr/sbin/nologin",
        "--comment",
        comment_for(agent),
        user,
        check=False,
    )
    # useradd fails (exit 9) when a concurrent spawn of the same agent created it meanwhile.
    again = run("getent", "passwd", user, check=False)
    if again.returncode != 0:
        raise ProvisionError(
            f"cannot create the agent user {user!r} (useradd exit {created.returncode}): "
            f"{created.stderr.strip()}"
        )
    _check_owner(again.stdout, agent, user)


def _agent_users(run: Run) -> int:
    listed = run("getent", "passwd", check=False).stdout
    return sum(
        1
        for line in listed.splitlines()
        if len(fields := line.split(":")) > 4 and fields[4].startswith(COMMENT_PREFIX)
    )


def _check_owner(passwd_line: str, agent: str, user: str) -> None:
    fields = passwd_line.strip().split(":")
    comment = fields[4] if len(fields) > 4 else ""
    if comment != comment_for(agent):
        raise ProvisionError(
            f"the user {user!r} exists but is not agent {agent!r}'s (its comment is "
            f"{comment!r}, not {comment_for(agent)!r}): Iris never runs an agent as a user it "
            "did not create for it. Rename the agent, or remove that user"
        )


def unit_user(unit_text: str) -> str | None:
    """The ``User=`` an installed unit runs as (None when it names none)."""
    for line in unit_text.splitlines():
        if line.startswith("User="):
            return line.removeprefix("User=").strip()
    return None

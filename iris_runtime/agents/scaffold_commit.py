"""Committing what spawn and remove change in the checkout (``terraform/agents.tf``).

Only when a GitHub token is configured and ``IRIS_REPO_DIR`` is a git checkout; otherwise one line
says it was skipped and git is never run. A commit that fails (no git, a hook, a signing prompt)
is reported and never undoes the agent: the agent works whether or not its declaration is
committed. Nothing is pushed.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from iris_runtime.provision.launch import Progress

log = logging.getLogger(__name__)

# Non-interactive whatever the user's git config says: no editor, no signing prompt.
GIT_OPTIONS = (
    "-c",
    "user.name=Iris",
    "-c",
    "user.email=iris@localhost",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.hooksPath=/dev/null",
)


def commit_repo_change(
    repo: Path, path: str, message: str, *, token_set: bool, progress: Progress
) -> bool:
    """Commit ``path`` (relative to ``repo``); True when a commit was made."""
    if not token_set:
        log.info("scaffold commit skipped: no GitHub token configured (IRIS_GITHUB_TOKEN)")
        progress("scaffold commit skipped: no GitHub token configured")
        return False
    if not (repo / ".git").exists():
        log.info("scaffold commit skipped: %s is not a git checkout", repo)
        progress(f"scaffold commit skipped: {repo} is not a git checkout")
        return False
    git = ["git", "-C", str(repo), *GIT_OPTIONS]
    try:
        done = _git(git, "add", "--", path)
        if done.returncode == 0:
            done = _git(git, "commit", "--no-verify", "-m", message, "--", path)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("scaffold commit failed: %s", exc)
        progress(f"scaffold commit failed ({exc}); the agent is not affected")
        return False
    if done.returncode != 0:
        log.warning("scaffold commit failed: %s", (done.stdout + done.stderr).strip()[-300:])
        progress("scaffold commit failed (see the log); the agent is not affected")
        return False
    progress(f"committed {path}")
    return True


def _git(git: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*git, *args], check=False, capture_output=True, text=True, timeout=60)

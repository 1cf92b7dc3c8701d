"""Scaffold commits: made only with a GitHub token and a git checkout, never blocked by hooks or
signing; otherwise skipped with one line, never attempted; a failure is reported, not raised."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iris_runtime.agents.scaffold_commit import commit_repo_change
from iris_runtime.agents.spawn_config import SpawnConfig
from iris_runtime.config import Settings


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "terraform").mkdir(parents=True)
    (repo / "terraform" / "agents.tf").write_text("# agents\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start")
    (repo / "terraform" / "agents.tf").write_text('# agents\nmodule "agent_boxed" {}\n')
    return repo


def commit(repo: Path, token_set: bool = True) -> tuple[bool, list[str]]:
    lines: list[str] = []
    made = commit_repo_change(
        repo,
        "terraform/agents.tf",
        "agents: spawn boxed (docker)",
        token_set=token_set,
        progress=lines.append,
    )
    return made, lines


def test_with_a_token_and_a_checkout_agents_tf_is_committed(checkout: Path) -> None:
    (checkout / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 1\n")
    (checkout / ".git" / "hooks" / "pre-commit").chmod(0o755)
    git(checkout, "config", "commit.gpgsign", "true")  # would wait for a key: never used
    assert commit(checkout) == (True, ["committed terraform/agents.tf"])
    assert "agents: spawn boxed (docker)" in git(checkout, "log", "--format=%s", "-1")
    assert git(checkout, "status", "--porcelain") == ""


def test_without_a_token_nothing_is_attempted(checkout: Path) -> None:
    assert commit(checkout, token_set=False) == (
        False,
        ["scaffold commit skipped: no GitHub token configured"],
    )
    assert git(checkout, "log", "--format=%s", "-1").strip() == "start"


def test_outside_a_git_checkout_nothing_is_attempted(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert commit(plain) == (False, [f"scaffold commit skipped: {plain} is not a git checkout"])
    assert not (plain / ".git").exists()


def test_a_failing_git_is_reported_not_raised(checkout: Path) -> None:
    (checkout / ".git" / "index.lock").write_text("")  # another git is "running"
    made, lines = commit(checkout)
    assert made is False
    assert lines == ["scaffold commit failed (see the log); the agent is not affected"]


def test_spawner_reads_the_token_setting(tmp_path: Path) -> None:
    for env, expected in (
        ({}, False),
        ({"GITHUB_TOKEN": "x"}, True),
        ({"IRIS_GITHUB_TOKEN": "y"}, True),
    ):
        settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path), **env})
        assert SpawnConfig.from_settings(settings).github_token_set is expected

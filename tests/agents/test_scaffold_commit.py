"""Scaffold commits: made only with a GitHub token and a git checkout; otherwise skipped with one
line, never attempted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iris_runtime.agents.spawn import Spawner
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


def spawner(tmp_path: Path, repo: Path, **env: str) -> tuple[Spawner, list[str]]:
    lines: list[str] = []
    settings = Settings.from_env(
        {"IRIS_DATA_DIR": str(tmp_path / "data"), "IRIS_REPO_DIR": str(repo), **env}
    )
    return Spawner(settings, progress=lines.append), lines


def test_with_a_token_and_a_checkout_agents_tf_is_committed(tmp_path: Path, checkout: Path) -> None:
    spawn, lines = spawner(tmp_path, checkout, IRIS_GITHUB_TOKEN="ghp_test")
    spawn.commit_scaffold("boxed", "docker")
    assert "agents: spawn boxed (docker)" in git(checkout, "log", "--format=%s", "-1")
    assert git(checkout, "status", "--porcelain") == ""
    assert lines == ["committed terraform/agents.tf"]


def test_without_a_token_nothing_is_attempted(tmp_path: Path, checkout: Path) -> None:
    spawn, lines = spawner(tmp_path, checkout)
    spawn.commit_scaffold("boxed", "docker")
    assert git(checkout, "log", "--format=%s", "-1").strip() == "start"
    assert lines == ["scaffold commit skipped: no GitHub token configured"]


def test_outside_a_git_checkout_nothing_is_attempted(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    spawn, lines = spawner(tmp_path, plain, GITHUB_TOKEN="ghp_test")
    spawn.commit_scaffold("boxed", "docker")
    assert lines == [f"scaffold commit skipped: {plain} is not a git checkout"]
    assert not (plain / ".git").exists()


def test_service_agents_change_nothing_in_the_repo(tmp_path: Path, checkout: Path) -> None:
    spawn, lines = spawner(tmp_path, checkout, IRIS_GITHUB_TOKEN="ghp_test")
    spawn.commit_scaffold("digest", "process")
    assert git(checkout, "log", "--format=%s", "-1").strip() == "start"
    assert lines == []

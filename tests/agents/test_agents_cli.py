"""``iris agents`` through the real command, including many processes writing at once."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.server import clean_environment, run_iris

TOKEN = "sub-agent-secret-token-7Hq2"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="")


def iris_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "iris_runtime", *args]


def agents(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_iris("agents", *args, env=env, timeout=60)


def with_stdin(env: dict[str, str], stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_iris("agents", *args, env=env, timeout=60, stdin=stdin)


def listed(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    result = agents(env, "list", "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    # Registered by hand, not spawned: nothing to say about how they run.
    assert all(entry.pop("run") is None for entry in entries)
    return {e["name"]: e for e in entries}


def assert_clean_failure(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


def test_register_list_unregister_round_trip(env: dict[str, str], tmp_path: Path) -> None:
    result = agents(
        env, "register", "worker", "http://127.0.0.1:4000", "--secret", "A", "--secrets-csv", "B,C"
    )
    assert result.returncode == 0, result.stderr
    assert "worker" in result.stdout and "A, B, C" in result.stdout
    assert listed(env) == {
        "worker": {
            "name": "worker",
            "bridge_url": "http://127.0.0.1:4000",
            "secrets": ["A", "B", "C"],
            "token": None,
        }
    }

    # Re-registering merges secrets unless told to replace them.
    assert (
        agents(env, "register", "worker", "http://127.0.0.1:4001", "--secret", "D").returncode == 0
    )
    assert listed(env)["worker"]["secrets"] == ["A", "B", "C", "D"]
    result = agents(env, "register", "worker", "http://127.0.0.1:4001", "--replace-secrets")
    assert result.returncode == 0 and listed(env)["worker"]["secrets"] == []

    text = agents(env, "list")
    assert (
        text.returncode == 0 and "worker" in text.stdout and "http://127.0.0.1:4001" in text.stdout
    )

    result = agents(env, "unregister", "worker")
    assert result.returncode == 0 and "unregistered worker" in result.stdout
    assert listed(env) == {}
    assert_clean_failure(agents(env, "unregister", "worker"), "no agent named 'worker'")
    registry = tmp_path / "data" / "agents.json"
    assert stat.S_IMODE(registry.stat().st_mode) == 0o600


def test_the_token_comes_from_stdin_and_is_never_printed(env: dict[str, str]) -> None:
    result = with_stdin(
        env, TOKEN + "\n", "register", "worker", "http://127.0.0.1:4000", "--token-stdin"
    )
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr and "****" in result.stdout
    for args in (("list",), ("list", "--json")):
        shown = agents(env, *args)
        assert shown.returncode == 0
        assert TOKEN not in shown.stdout + shown.stderr
        assert "****" + TOKEN[-4:] in shown.stdout

    # Re-registering without --token-stdin keeps the token.
    assert agents(env, "register", "worker", "http://127.0.0.1:4002").returncode == 0
    assert listed(env)["worker"]["token"] == "****" + TOKEN[-4:]


def test_a_token_is_never_accepted_as_an_argument(env: dict[str, str]) -> None:
    result = agents(env, "register", "worker", "http://127.0.0.1:4000", "--token", TOKEN)
    assert result.returncode == 2 and "No such option" in result.stderr
    assert listed(env) == {}


def test_token_stdin_without_a_token_fails_cleanly(env: dict[str, str]) -> None:
    result = with_stdin(env, "\n", "register", "worker", "http://127.0.0.1:4000", "--token-stdin")
    assert_clean_failure(result, "no token on stdin")
    assert listed(env) == {}


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (("Bad Name", "http://127.0.0.1:4000"), "invalid agent name"),
        (("worker", "ftp://127.0.0.1:4000"), "http:// or https://"),
        (("worker", "http://127.0.0.1:4000/?q=1"), "query or fragment"),
        (("worker", "http://127.0.0.1:4000", "--secret", "no spaces"), "invalid secret name"),
    ],
)
def test_bad_arguments_fail_with_a_clear_message(
    env: dict[str, str], args: tuple[str, ...], phrase: str
) -> None:
    assert_clean_failure(agents(env, "register", *args), "Error:", phrase)


def test_credentials_in_a_url_are_refused_and_not_echoed(env: dict[str, str]) -> None:
    result = agents(env, "register", "worker", "http://alice:hunter2@127.0.0.1:4000")
    assert_clean_failure(result, "credentials")
    assert "hunter2" not in result.stdout + result.stderr


def test_a_corrupt_registry_is_reported_and_left_alone(env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    content = b'{"worker": {"bridge_url": "http://127.0.0.1:4000", "extra": 1}}'
    (data / "agents.json").write_bytes(content)
    for args in (
        ("list",),
        ("register", "other", "http://127.0.0.1:4001"),
        ("unregister", "worker"),
    ):
        assert_clean_failure(agents(env, *args), "agents.json", "unknown key(s) 'extra'")
    assert (data / "agents.json").read_bytes() == content


def run_at_once(commands: list[list[str]], env: dict[str, str]) -> list[tuple[int, str]]:
    """Start every command before waiting for any; (exit code, stderr) of each, in order."""
    processes: list[subprocess.Popen[str]] = []
    try:
        for command in commands:
            processes.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
        results = []
        for process in processes:
            _, stderr = process.communicate(timeout=240)
            results.append((process.returncode, stderr))
        return results
    finally:
        for process in processes:  # only on failure: never leave children behind
            if process.poll() is None:
                process.kill()
                process.wait()


# 50 interpreter start-ups compete for the CPUs; the lock itself is held for milliseconds.
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fifty_concurrent_registrations_all_land(env: dict[str, str]) -> None:
    commands = [
        iris_command("agents", "register", f"agent-{n}", f"http://127.0.0.1:5{n}00")
        for n in range(50)
    ]
    results = run_at_once(commands, env)
    failures = [(n, code, err) for n, (code, err) in enumerate(results) if code != 0]
    assert not failures
    entries = listed(env)
    assert sorted(entries) == sorted(f"agent-{n}" for n in range(50))
    assert all(entries[f"agent-{n}"]["bridge_url"] == f"http://127.0.0.1:5{n}00" for n in range(50))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_concurrent_registrations_of_one_name_merge_their_secrets(env: dict[str, str]) -> None:
    url = "http://127.0.0.1:4000"
    commands = [
        iris_command("agents", "register", "shared", url, "--secret", f"S{n}") for n in range(12)
    ]
    for code, stderr in run_at_once(commands, env):
        assert code == 0, stderr
    assert sorted(listed(env)["shared"]["secrets"]) == sorted(f"S{n}" for n in range(12))

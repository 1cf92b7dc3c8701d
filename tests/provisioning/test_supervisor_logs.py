"""The supervisor's handling of an agent's log file: private, bounded, rotated once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iris_runtime.provision import agent_log
from iris_runtime.provision.agent_log import open_log, rotate_log
from iris_runtime.provision.supervised_child import child_environment


def test_a_new_log_is_private_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "home" / "logs" / "agent.log"
    for line in (b"one\n", b"two\n"):
        fd = open_log(path)
        os.write(fd, line)
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_large_log_is_rotated_at_start_and_while_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.log"
    rotated = tmp_path / "agent.log.1"
    monkeypatch.setattr(agent_log, "LOG_ROTATE_BYTES", 10)  # 10 MB in production
    path.write_bytes(b"x" * 11)
    os.close(open_log(path))  # at a (re)start: moved aside, a fresh file
    assert rotated.read_bytes() == b"x" * 11
    assert path.read_bytes() == b""

    # While running: the writer's O_APPEND descriptor carries on at the new end.
    fd = open_log(path)
    os.write(fd, b"y" * 11)
    assert rotate_log(path) is True
    os.write(fd, b"z")
    os.close(fd)
    assert rotated.read_bytes() == b"y" * 11
    assert rotated.stat().st_mode & 0o777 == 0o600
    assert path.read_bytes() == b"z"
    assert rotate_log(path) is False  # small again: left alone


def test_a_child_gets_only_harmless_variables_of_iris(tmp_path: Path) -> None:
    iris = {
        "PATH": "/venv/bin:/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "IRIS_API_TOKEN": "parent-token",
        "ANTHROPIC_API_KEY": "sk-parent",
        "TELEGRAM_BOT_TOKEN": "123:abc",
        "IRIS_ENV_FILE": "/iris/.env",
    }
    env = child_environment(iris, {"AGENT_NAME": "digest", "TELEGRAM_BOT_TOKEN": ""})
    assert env == {
        "PATH": "/venv/bin:/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "AGENT_NAME": "digest",
        "TELEGRAM_BOT_TOKEN": "",
    }

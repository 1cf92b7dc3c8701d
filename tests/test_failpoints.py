"""Failpoints fire only from a file of Iris's own user: a variable left set by mistake hands
nobody else a switch that kills Iris."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PASS_POINT = "from iris_runtime.failpoints import failpoint; failpoint('here'); print('alive')"


def _pass_the_point(armed: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IRIS_FAILPOINT_FILE": str(armed)}
    return subprocess.run(
        [sys.executable, "-c", PASS_POINT], env=env, capture_output=True, text=True, timeout=60
    )


def test_an_armed_point_kills_the_process_and_disarms(tmp_path: Path) -> None:
    armed = tmp_path / "failpoint"
    armed.write_text("here\n")
    assert _pass_the_point(armed).returncode == -signal.SIGKILL
    assert not armed.exists()  # the restarted process goes on
    assert _pass_the_point(armed).stdout.strip() == "alive"


def test_another_point_or_someone_else_s_file_arms_nothing(tmp_path: Path) -> None:
    armed = tmp_path / "failpoint"
    armed.write_text("elsewhere")
    assert _pass_the_point(armed).stdout.strip() == "alive"
    link = tmp_path / "link"
    armed.write_text("here")
    link.symlink_to(armed)
    assert _pass_the_point(link).stdout.strip() == "alive"  # a link is not followed
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(armed, 65534, 65534)
    assert _pass_the_point(armed).stdout.strip() == "alive"
    assert armed.exists()

"""Credentials given as ``NAME_FILE`` (``IRIS_API_TOKEN_FILE`` here; Slack, Telegram and the Web
UI read theirs the same way, through ``config.credential``): a file that cannot be used stops
the command with a message naming the variable and the file, never a traceback or a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris_runtime.testing.server import clean_environment, run_iris


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "IRIS_API_TOKEN_FILE: cannot read"),
        (b"\xfftok-\xfe\n", "is not UTF-8 text (byte 0)"),
    ],
)
def test_an_unusable_token_file_is_a_clear_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    token_file = tmp_path / "api-token"
    if content is not None:
        token_file.write_bytes(content)
    env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_API_TOKEN_FILE=str(token_file)
    )
    done = run_iris("agents", "list", "--json", env=env)
    assert done.returncode != 0
    assert message in done.stderr and str(token_file) in done.stderr
    assert "Traceback" not in done.stderr and "tok-" not in done.stderr

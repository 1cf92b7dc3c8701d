"""Channel ids, session ids and file names: only safe ones become paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris_runtime.engine.channels import (
    resolve_channel_dir,
    resolve_channel_path,
    session_channel,
    validate_filename,
)
from iris_runtime.errors import InvalidInput


@pytest.mark.parametrize("channel", ["C0123ABC", "tg--100123", "SESSION-a.b_c", "D1.1755@x+y"])
def test_platform_channel_ids_are_accepted(tmp_path: Path, channel: str) -> None:
    assert resolve_channel_dir(tmp_path, channel) == tmp_path.resolve() / channel


@pytest.mark.parametrize(
    "channel", ["", "..", "a/b", "../x", "a..b", ".hidden", "a\x00b", "ü", "x" * 201, "events"]
)
def test_odd_channel_ids_are_rejected(tmp_path: Path, channel: str) -> None:
    with pytest.raises(InvalidInput):
        resolve_channel_dir(tmp_path, channel)


@pytest.mark.parametrize("session", ["", "a b", "a/b", "..", "a..b", "-lead", "a$", "x" * 129])
def test_odd_session_ids_are_rejected(session: str) -> None:
    with pytest.raises(InvalidInput) as info:
        session_channel(session)
    assert info.value.code == "invalid_session_id"


@pytest.mark.parametrize(
    "name", ["..", "../x", "a/b", "a\\b", "a\x00b", "a\nb", "a\x7fb", ".env", "", "x" * 201]
)
def test_odd_file_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidInput):
        validate_filename(name)


def test_file_paths_stay_inside_the_channel(tmp_path: Path) -> None:
    path = resolve_channel_path(tmp_path, "SESSION-a", "attachments", "report.pdf")
    assert path == tmp_path.resolve() / "SESSION-a" / "attachments" / "report.pdf"


def test_a_symlinked_channel_dir_cannot_escape(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "evil").symlink_to(tmp_path)
    with pytest.raises(InvalidInput):
        resolve_channel_path(data, "evil", "x.txt")

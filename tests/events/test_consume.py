"""Removing a fired event file never deletes a newer version a writer put in its place, however
the two interleave, and a crash half-way through is settled at the next start."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris_runtime.events.consume import consume, recover_consuming
from iris_runtime.events.files import digest, write_atomic
from tests.events.conftest import Harness, immediate


def body(text: str) -> bytes:
    return json.dumps(immediate(text=text)).encode()


def test_a_version_written_while_the_fired_one_is_removed_still_runs(harness: Harness) -> None:
    event = harness.data_dir / "events/x.json"

    def replaced_meanwhile(path: Path) -> None:
        # `iris events add --replace` lands at the last moment before the fired file goes.
        write_atomic(event, body("v2 must run"))
        os.remove(path)

    service = harness.service(remove_file=replaced_meanwhile)
    harness.write("events/x.json", body("v1"))
    harness.step(service)
    harness.step(service, 1)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["v1", "v2 must run"]


def test_a_version_that_lands_just_before_the_file_is_taken_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(body("v1"))
    real_rename = os.rename

    def writer_wins(src: Path, dst: Path) -> None:
        write_atomic(path, body("v2"))  # after the content check, before the rename
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", writer_wins)
    assert consume(path, digest(body("v1"))) == "newer"
    assert path.read_bytes() == body("v2")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_a_still_newer_version_wins_over_the_one_being_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(body("v1"))
    real_rename, real_link = os.rename, os.link

    def v2_lands(src: Path, dst: Path) -> None:
        write_atomic(path, body("v2"))
        real_rename(src, dst)

    def v3_lands(src: Path, dst: Path, *, follow_symlinks: bool = True) -> None:
        write_atomic(path, body("v3"))
        real_link(src, dst, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "rename", v2_lands)
    monkeypatch.setattr(os, "link", v3_lands)
    assert consume(path, digest(body("v1"))) == "newer"
    assert path.read_bytes() == body("v3")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_removal_outcomes(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert consume(path, digest(body("v1"))) == "gone"
    path.write_bytes(body("v2"))
    assert consume(path, digest(body("v1"))) == "newer" and path.exists()
    assert consume(path, digest(body("v2"))) == "removed" and not path.exists()
    os.symlink("elsewhere.json", path)
    assert consume(path, digest(body("v2"))) == "newer" and path.is_symlink()


def test_a_crash_mid_removal_is_settled_at_start_up(harness: Harness) -> None:
    folder = harness.data_dir / "events"
    folder.mkdir()
    ran, pending = body("ran"), body("never ran")
    # A crash after the fired version was taken aside: it is removed at start-up.
    (folder / f".consuming-{digest(ran)}.done.json.tmp").write_bytes(ran)
    # A crash while a newer version was held: it goes back under its name and runs.
    (folder / f".consuming-{digest(ran)}.newer.json.tmp").write_bytes(pending)
    # ... unless a newer one still took its place meanwhile.
    (folder / f".consuming-{digest(ran)}.taken.json.tmp").write_bytes(pending)
    (folder / "taken.json").write_bytes(body("newest"))
    service = harness.service()
    assert sorted(p.name for p in folder.iterdir()) == ["newer.json", "taken.json"]
    harness.step(service)
    assert sorted(t.split("] ")[1] for t in harness.transport.texts()) == ["never ran", "newest"]


def test_private_removal_files_are_never_events_nor_worth_a_note(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    service = harness.service()
    harness.write(f"events/.consuming-{'0' * 64}.x.json.tmp", body("not an event"))
    harness.step(service)
    harness.step(service, 2)
    assert harness.transport.accepted == []
    assert ".consuming-" not in caplog.text
    assert recover_consuming(harness.data_dir / "missing") == []

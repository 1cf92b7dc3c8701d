"""Things in the event folders that are not what their names say: a FIFO, a symlink or a folder
named like a reason file, symlinked event folders and symlinked event files. None of them may
hang the watcher, make it read or delete anything outside the data dir, or stop its passes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris_runtime.errors import InvalidInput
from iris_runtime.events.catalog import add_event, fire_event, list_events, remove_event
from iris_runtime.events.files import EventSpec, Folder, folders_for
from tests.events.conftest import START, Harness, immediate, one_shot


@pytest.mark.timeout(20)  # the bug was a hang: the watcher blocked opening the FIFO
def test_a_fifo_named_like_a_reason_file_does_not_hang_the_watcher(harness: Harness) -> None:
    service = harness.service()
    bad = harness.write("events/bad.json", "{not json")
    os.mkfifo(bad.with_name("bad.json.error"))
    harness.write("events/good.json", immediate(text="still runs"))
    harness.step(service)
    harness.step(service, 2)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["still runs"]
    reason = bad.with_name("bad.json.error")
    assert reason.is_file(), "the FIFO is replaced by the reason"
    assert "malformed JSON" in reason.read_text()


@pytest.mark.timeout(20)
def test_listing_never_follows_or_blocks_on_a_reason_file(harness: Harness, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    harness.write("events/linked.json", immediate())
    os.symlink(secret, harness.data_dir / "events/linked.json.error")
    harness.write("events/piped.json", immediate())
    os.mkfifo(harness.data_dir / "events/piped.json.error")
    huge = harness.write("events/huge.json", immediate())
    huge.with_name("huge.json.error").write_bytes(b"r" * 1_000_000)

    entries = {e["name"]: e for e in list_events(harness.data_dir, folders_for([]), START)}
    assert "TOP-SECRET-VALUE" not in json.dumps(entries)
    assert entries["linked"]["status"] == "scheduled" and entries["linked"]["error"] is None
    assert entries["piped"]["status"] == "scheduled"
    assert len(entries["huge"]["error"]) <= 4096


def test_a_folder_named_like_a_reason_file_does_not_break_full_passes(harness: Harness) -> None:
    service = harness.service()
    (harness.data_dir / "events/orphan.json.error").mkdir(parents=True)
    bad = harness.write("events/bad.json", b"{")
    bad.with_name("bad.json.error").mkdir()
    harness.write("events/good.json", immediate(text="runs"))
    for _ in range(3):
        harness.step(service, 2)  # a full pass raised IsADirectoryError here, every time
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["runs"]
    assert (harness.data_dir / "events/orphan.json.error").is_dir()
    assert bad.exists()


@pytest.mark.parametrize("link", ["events", "slack"])
def test_a_symlinked_event_folder_is_refused_and_what_it_points_to_is_left_alone(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture, link: str
) -> None:
    outside = tmp_path / "outside"
    target = outside / "events" if link == "slack" else outside
    target.mkdir(parents=True)
    (target / "keep.json").write_text(json.dumps(immediate(text="outside")))
    (target / "notes.json").write_text('{"my": "config"}')
    os.symlink(outside, harness.data_dir / link)
    service = harness.service()
    for _ in range(3):
        harness.step(service, 2)
    assert harness.transport.accepted == []
    assert sorted(os.listdir(target)) == ["keep.json", "notes.json"]
    assert f"not watching {link}" in caplog.text and "symbolic link" in caplog.text


def test_a_folder_replaced_by_a_symlink_cancels_its_events(
    harness: Harness, tmp_path: Path
) -> None:
    service = harness.service()
    harness.write("events/later.json", one_shot("2024-06-01T13:00:00Z"))
    harness.step(service)
    assert service.next_time("events/later.json") is not None
    real = harness.data_dir / "events"
    real.rename(tmp_path / "moved")
    os.symlink(tmp_path / "moved", real)
    harness.step(service, 3600)
    assert service.next_time("events/later.json") is None
    assert harness.transport.accepted == []
    assert (tmp_path / "moved/later.json").exists()


def test_removing_or_firing_a_symlinked_event_never_touches_its_target(harness: Harness) -> None:
    target = harness.write("events/b.json", immediate())
    os.symlink("b.json", harness.data_dir / "events/a.json")
    with pytest.raises(InvalidInput, match="symbolic link"):
        fire_event(harness.data_dir, Folder("events"), "a", START)
    removed = remove_event(harness.data_dir, Folder("events"), "a")
    assert removed == harness.data_dir / "events/a.json"
    assert not os.path.lexists(removed) and target.exists()


def test_writing_through_a_symlinked_folder_is_refused(harness: Harness, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, harness.data_dir / "events")
    spec = EventSpec("immediate", "C1", "x")
    with pytest.raises(InvalidInput) as refused:
        add_event(harness.data_dir, Folder("events"), "x", spec)
    assert refused.value.code == "unsafe_folder"
    with pytest.raises(InvalidInput):
        remove_event(harness.data_dir, Folder("events"), "x")
    assert list(outside.iterdir()) == []

"""Things in the event folders that are not what their names say: a FIFO, a symlink or a folder
named like a reason file, symlinked event folders and symlinked event files. None of them may
hang the watcher, make it read or delete anything outside the data dir, or stop its passes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris_runtime.events.catalog import list_events
from iris_runtime.events.files import folders_for
from tests.events.conftest import START, Harness, immediate


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

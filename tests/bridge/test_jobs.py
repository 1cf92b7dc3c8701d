"""Job logs on their own: seq, reads after a seq, interruption, retention."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from iris_runtime.bridge.jobs import JobExists, JobStore
from iris_runtime.errors import InvalidInput, NotFound


def test_events_get_dense_seqs_and_nothing_follows_the_terminal_one(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.create("r1")
    job.append("status", text="a")
    job.append("final", text="done")
    assert job.append("status", text="late") is None
    events, done = store.read("r1")
    assert [e["seq"] for e in events] == [1, 2] and done
    assert [e["type"] for e in store.read("r1", since=1)[0]] == ["final"]
    store.finished(job)
    assert store.read("r1", since=2) == ([], True)  # now from disk


def test_ids_are_checked_and_unique(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.create("r1")
    with pytest.raises(JobExists):
        store.create("r1")
    with pytest.raises(InvalidInput):
        store.create("../escape")
    with pytest.raises(NotFound):
        store.read("never")


def test_unfinished_logs_are_marked_interrupted_and_finished_ones_untouched(tmp_path: Path) -> None:
    first = JobStore(tmp_path)
    running = first.create("running")
    running.append("status", text="working")
    finished = first.create("finished")
    finished.append("final", text="ok")
    before = (tmp_path / "bridge-jobs" / "finished.jsonl").read_bytes()
    restarted = JobStore(tmp_path)
    assert restarted.interrupt_unfinished() == 1
    events, done = restarted.read("running")
    assert done and events[-1]["code"] == "interrupted" and events[-1]["seq"] == 2
    assert (tmp_path / "bridge-jobs" / "finished.jsonl").read_bytes() == before


def test_the_sweep_removes_only_old_finished_logs(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    old = store.create("old")
    old.append("final", text="x")
    store.finished(old)
    live = store.create("live")
    fresh = store.create("fresh")
    fresh.append("final", text="y")
    store.finished(fresh)
    long_ago = time.time() - 7200
    for name in ("old", "live"):
        os.utime(tmp_path / "bridge-jobs" / f"{name}.jsonl", (long_ago, long_ago))
    assert store.sweep(3600) == 1
    assert sorted(p.stem for p in (tmp_path / "bridge-jobs").glob("*.jsonl")) == ["fresh", "live"]
    assert live.request_id == "live"


def test_a_lone_surrogate_is_logged_and_streamed_escaped(tmp_path: Path) -> None:
    """No UTF-8 can carry a lone surrogate: the event is written with ASCII escapes instead of
    failing, so the log still ends and the stream still gets its final line."""
    store = JobStore(tmp_path)
    job = store.create("req-surrogate")
    job.append("final", text="broken \ud800 text", status="done")
    store.finished(job)
    lines, done = job.wait_lines_after(0, 0)
    assert done and lines.isascii() and json.loads(lines)["text"] == "broken \ud800 text"
    logged = json.loads(job.path.read_text(encoding="utf-8"))
    assert logged["text"] == "broken \ud800 text" and logged["seq"] == 1 and "ts" in logged
    assert store.read("req-surrogate", 0) == ([job.events[0]], True)

"""Durable session logs: append, reset markers, torn lines, replay after a restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iris_runtime.engine.provider import Message
from iris_runtime.engine.sessions import SessionStore, summary_messages


def test_context_is_replayed_from_disk_by_a_new_store(tmp_path: Path) -> None:
    first = SessionStore(tmp_path)
    first.append_message("SESSION-a", "user", "hi")
    first.append_message("SESSION-a", "assistant", "hello")
    again = SessionStore(tmp_path)  # a restarted process
    assert again.context("SESSION-a") == [Message("user", "hi"), Message("assistant", "hello")]


def test_reset_keeps_the_log_but_clears_the_context(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.append_message("SESSION-a", "user", "old")
    store.reset("SESSION-a")
    store.append_message("SESSION-a", "user", "new")
    assert store.context("SESSION-a") == [Message("user", "new")]
    assert SessionStore(tmp_path).context("SESSION-a") == [Message("user", "new")]
    assert [e["type"] for e in store.entries("SESSION-a")] == ["message", "reset", "message"]
    assert [e.get("text") for e in store.entries("SESSION-a", since_reset=True)] == [None, "new"]


def test_a_torn_last_line_is_skipped_and_never_glues_onto_the_next(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.append_message("SESSION-a", "user", "whole")
    log = store.log_path("SESSION-a")
    with log.open("a") as handle:
        handle.write('{"type":"message","role":"user","te')  # a crash mid-write
    store.append_message("SESSION-a", "assistant", "after the crash")
    texts = [e["text"] for e in SessionStore(tmp_path).entries("SESSION-a")]
    assert texts == ["whole", "after the crash"]


def test_log_files_are_private(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.append_message("SESSION-a", "user", "secret plans")
    assert store.log_path("SESSION-a").stat().st_mode & 0o077 == 0


def test_cancelled_messages_are_logged_but_not_replayed(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.append_message("SESSION-a", "user", "never ran", status="cancelled")
    assert store.context("SESSION-a") == []
    assert store.entries("SESSION-a")[0]["status"] == "cancelled"


def test_a_marker_written_before_runs_were_named_still_replays_whole(tmp_path: Path) -> None:
    # Logs from before the fix: the marker follows the compacting run's user line, ``kept``
    # counts the turns before it, and nothing names the run.
    store = SessionStore(tmp_path)
    for role, text in [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")]:
        store.append_message("SESSION-a", role, text)
    store.append_message("SESSION-a", "user", "u3", runId="r3")
    with store.log_path("SESSION-a").open("a") as handle:
        handle.write(json.dumps({"type": "compaction", "summary": "S", "kept": 2}) + "\n")
    store.append_message("SESSION-a", "assistant", "a3", runId="r3")
    assert SessionStore(tmp_path).context("SESSION-a") == [
        *summary_messages("S"),
        Message("user", "u2"),
        Message("assistant", "a2"),
        Message("user", "u3"),
        Message("assistant", "a3"),
    ]


def test_the_context_knows_its_length_through_appends_trims_and_resets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("iris_runtime.engine.sessions.MAX_CONTEXT_MESSAGES", 3)
    store = SessionStore(tmp_path)
    store.context("SESSION-a")  # cached from here on, kept up to date by appends

    def consistent() -> bool:
        context = store.context("SESSION-a")
        return context.chars == sum(len(m.text) for m in context)

    for text in ("one", "three", "fifteen", "x" * 40, "y"):
        store.append_message("SESSION-a", "user", text)
        assert consistent()
    assert [m.text for m in store.context("SESSION-a")] == ["fifteen", "x" * 40, "y"]
    store.reset("SESSION-a")
    assert consistent() and store.context("SESSION-a").chars == 0
    assert SessionStore(tmp_path).context("SESSION-a").chars == 0  # replayed from disk

"""Workspace files read on every message are reused only while they are provably unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iris_runtime.engine.filecache import FileCache

LONG_AGO = 1_000_000_000  # seconds since the epoch: settled


def counting_cache() -> tuple[FileCache[str], list[str]]:
    reads: list[str] = []

    def load(path: str) -> str:
        reads.append(path)
        return Path(path).read_text(encoding="utf-8")

    return FileCache(load, missing=lambda path: ""), reads


def test_a_settled_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, reads = counting_cache()
    memory = tmp_path / "MEMORY.md"
    memory.write_text("remember", encoding="utf-8")
    assert [cache.get(str(memory)) for _ in range(3)] == ["remember"] * 3
    assert len(reads) == 3  # just written: its times may not tell the next write apart
    monkeypatch.setattr("iris_runtime.engine.filecache.SETTLED_NS", 0)
    assert [cache.get(str(memory)) for _ in range(3)] == ["remember"] * 3
    assert len(reads) == 4


def test_every_rewrite_is_seen_even_with_the_same_size_and_times(tmp_path: Path) -> None:
    cache, _ = counting_cache()
    memory = tmp_path / "MEMORY.md"
    for text in ("first", "again", "third"):
        memory.write_text(text, encoding="utf-8")
        os.utime(memory, (LONG_AGO, LONG_AGO))
        assert cache.get(str(memory)) == text


def test_a_missing_file_gives_the_default_and_is_read_once_it_exists(tmp_path: Path) -> None:
    cache, _ = counting_cache()
    path = tmp_path / "CONSTITUTION.md"
    assert cache.get(str(path)) == ""
    path.write_text("be kind", encoding="utf-8")
    assert cache.get(str(path)) == "be kind"

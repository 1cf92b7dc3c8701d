"""``state.db``: reads take no write lock (a writer elsewhere, such as a long transaction of
another part of Iris, never blocks the firing thread's lookups), and lookups stay few however
many firings are asked about."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iris_runtime.events.state import Firing, FiringStore, database_problem


def firing(i: int) -> Firing:
    return Firing(f"events/e{i}.json", f"k{i}", "immediate", "C1", f"prompt {i}", "d" * 64)


def test_reads_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    store = FiringStore(tmp_path / "state.db")
    store.open()
    store.put([firing(1)])
    writer = sqlite3.connect(tmp_path / "state.db", isolation_level=None, timeout=0)
    writer.execute("BEGIN IMMEDIATE")  # holds the write lock, as a long writer would
    try:
        assert store.get_many([firing(1).ident]) == {firing(1).ident: firing(1)}
        assert store.get("events/e1.json", "k1") == firing(1)
        assert [f.ident for f in store.unsettled()] == [firing(1).ident]
        assert store.count() == 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        store.close()


def test_many_lookups_at_once(tmp_path: Path) -> None:
    store = FiringStore(tmp_path / "state.db")
    store.open()
    store.put(firing(i) for i in range(0, 2000, 2))
    found = store.get_many(firing(i).ident for i in range(2000))
    assert sorted(found) == sorted(firing(i).ident for i in range(0, 2000, 2))
    assert store.get_many([]) == {}
    store.close()


def test_a_damaged_database_is_reported_without_being_changed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert database_problem(path) is None  # not created yet
    path.write_bytes(b"garbage" * 1000)
    assert "file is not a database" in str(database_problem(path))
    assert path.read_bytes() == b"garbage" * 1000

"""Fixtures shared by the provisioning tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iris_runtime.provision.process_groups import stop_recorded
from iris_runtime.provision.supervised import SupervisedStore


@pytest.fixture
def reap_agents(tmp_path: Path) -> Iterator[None]:
    """After the test (and after its Iris servers stopped: request this fixture first), stop
    any agent still recorded under ``tmp_path``: a failed test may leave an orphan behind."""
    yield
    for db in tmp_path.rglob("state.db"):
        with SupervisedStore(db.parent) as store:
            for process in store.all():
                if process.pid is not None:
                    stop_recorded(process.name, process.pid, process.pid_start_time)

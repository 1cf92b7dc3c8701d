"""The gvisor level (runsc, ptrace platform here) for real, through a served Iris."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.sandbox.support import assert_boundary, require_tools, served_turn


def _require_runsc() -> None:
    if os.geteuid() != 0:
        pytest.skip("runsc runs as root")
    require_tools("runsc", "ip")


def test_gvisor_boundary_seen_by_a_model_turn(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    _require_runsc()
    iris, report, results = served_turn(start_iris, tmp_path, "gvisor:ptrace")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"
    assert report["write_usr"] == "refused"
    # Every run's bundle is gone when its command ended.
    assert list((iris.data_dir / "run" / "gvisor" / "bundles").iterdir()) == []

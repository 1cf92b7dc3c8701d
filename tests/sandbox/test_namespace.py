"""The namespace level (bubblewrap) for real, through a served Iris."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer
from tests.sandbox.support import assert_boundary, require_tools, served_turn


def test_namespace_boundary_seen_by_a_model_turn(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    require_tools("bwrap", "ip")
    iris, report, results = served_turn(start_iris, tmp_path, "namespace")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"  # no network but loopback
    assert report["hostname"] == "sandbox"
    assert report["write_usr"] == "refused"


def test_namespace_net_keeps_the_hosts_network(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    require_tools("bwrap", "ip")
    iris, report, results = served_turn(start_iris, tmp_path, "namespace:net")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] != "lo,"  # the host's interfaces, asked for

"""The namespace level (bubblewrap) for real, through a served Iris."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from iris_runtime.tools.sandbox.namespace import NamespaceSandbox
from iris_runtime.tools.sandbox.probe import parse, problems
from tests.sandbox.support import assert_boundary, require_tools, served_turn
from tests.sandbox.test_levels_unavailable import _spec

Unprivileged = tuple[Callable[..., IrisServer], Path]


def test_namespace_boundary_seen_by_a_model_turn(unprivileged: Unprivileged) -> None:
    require_tools("bwrap", "ip")
    iris, report, results = served_turn(unprivileged[0], unprivileged[1], "namespace")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"  # no network but loopback
    assert report["hostname"] == "sandbox"
    assert report["write_usr"] == "refused"


def test_namespace_net_keeps_the_hosts_network(unprivileged: Unprivileged) -> None:
    require_tools("bwrap", "ip")
    iris, report, results = served_turn(unprivileged[0], unprivileged[1], "namespace:net")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] != "lo,"  # the host's interfaces, asked for


def test_namespace_is_refused_when_iris_runs_as_root(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """bwrap maps the command's uid to Iris's: as root, the host would check its file accesses
    as root (/etc/shadow, host keys). Iris refuses to start rather than run it."""
    require_tools("bwrap")
    if os.geteuid() != 0:
        pytest.skip("needs root (CI runs as root)")
    with pytest.raises(RuntimeError) as refused:
        served_turn(start_iris, tmp_path, "namespace")
    assert "refuses to run while Iris runs as root" in str(refused.value)
    assert not (tmp_path / "data" / "work" / "report.txt").exists()


def test_the_probe_refuses_a_command_that_is_host_root(tmp_path: Path) -> None:
    """A command that can read a root-only file (/etc/shadow) is host root: refused."""
    report = parse(
        "namespace",
        "uid=10000\nroot_files_readable=yes\nroot_writable=no\nworkspace_writable=yes\ndata_dir_visible=no\n",
    )
    sandbox = NamespaceSandbox(_spec(tmp_path, "namespace"), "/usr/bin/bwrap")
    assert any("root-only files" in p for p in problems(report, sandbox, iris_uid=0))

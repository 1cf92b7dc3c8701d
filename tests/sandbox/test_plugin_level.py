"""``register_sandboxes``: a plugin's level (the probe plugin's) is chosen with IRIS_SANDBOX, runs
the bash and file tools, and is proven like a built-in one; a level that claims a boundary it
does not have is refused at start-up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer, free_port, run_iris
from tests.sandbox.support import assert_boundary, require_tools, served_turn
from tests.test_plugins import cli_env, python_path


def test_a_plugin_level_serves_a_turn(
    unprivileged: tuple[Callable[..., IrisServer], Path],
) -> None:
    require_tools("bwrap", "ip")  # the fixture's level is built on namespace: not as root
    iris, report, results = served_turn(
        *unprivileged,
        "probe-box",
        IRIS_LOAD_PLUGINS="scripted,probe",
        PYTHONPATH=python_path(),
    )
    assert_boundary(iris.data_dir, report, results)
    assert report["hostname"] == "probe-box"


def test_a_level_whose_probe_shows_the_host_stops_serve(tmp_path: Path) -> None:
    env = cli_env(tmp_path, IRIS_API_PORT=str(free_port()), IRIS_LOAD_PLUGINS="probe")
    result = run_iris("serve", "--sandbox", "probe-leaky", env=env, timeout=60)
    assert result.returncode != 0
    assert "sandbox 'probe-leaky' shows the host" in result.stderr
    assert "Iris's data folder is visible inside" in result.stderr


def test_a_wrap_only_level_is_refused_unless_unproven_is_asked_for(tmp_path: Path) -> None:
    """A plugin level with only ``wrap()`` has no view and no probe: it runs on the host's data
    dir. ``iris serve`` refuses it unless IRIS_SANDBOX_UNPROVEN=1; then doctor warns."""
    env = cli_env(tmp_path, IRIS_API_PORT=str(free_port()), IRIS_LOAD_PLUGINS="probe")
    refused = run_iris("serve", "--sandbox", "probe", env=env, timeout=60)
    assert refused.returncode != 0
    assert "IRIS_SANDBOX_UNPROVEN=1" in refused.stderr
    doctor = run_iris(
        "doctor", env={**env, "IRIS_SANDBOX": "probe", "IRIS_SANDBOX_UNPROVEN": "1"}, timeout=60
    )
    line = next(row for row in doctor.stdout.splitlines() if "] sandbox " in row)
    assert "warn" in line and "unproven" in line, doctor.stdout

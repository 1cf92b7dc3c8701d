"""What SystemdService.install refuses before it touches systemd: a unit that fails
`systemd-analyze verify`, an existing unit file, a missing unit directory or template, root as
the agent user. Runs on this host (systemd need not be PID 1); systemctl must never be reached,
so it names a program that does not exist."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import AgentLaunch, no_progress
from iris_runtime.provision.systemd import SystemdService

REPO = Path(__file__).resolve().parents[2]
NO_SYSTEMCTL = "/nonexistent/systemctl"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (systemd package)"
)


def launch(tmp_path: Path, command: tuple[str, ...] = ("/bin/sh", "-c", "sleep 60")) -> AgentLaunch:
    home = tmp_path / "agents" / "digest"
    home.mkdir(parents=True, exist_ok=True)
    return AgentLaunch("digest", home, 4001, 4101, command, {"AGENT_NAME": "digest"})


def service(unit_dir: Path, repo: Path = REPO) -> SystemdService:
    return SystemdService(repo, unit_dir, NO_SYSTEMCTL, journalctl=NO_SYSTEMCTL)


def test_a_unit_that_fails_verify_is_never_written(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    steps: list[str] = []
    with pytest.raises(ProvisionError, match="is not executable") as failure:
        service(unit_dir).install(launch(tmp_path, ("/nonexistent/iris",)), steps.append)
    assert "systemd-analyze verify iris-agent-digest.service failed" in failure.value.message
    assert list(unit_dir.iterdir()) == []
    assert steps[-1] == "checking iris-agent-digest.service with systemd-analyze verify"


def test_an_existing_unit_file_is_left_alone(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    existing = unit_dir / "iris-agent-digest.service"
    existing.write_text("[Service]\nExecStart=/bin/true\n")
    with pytest.raises(ProvisionError, match="already exists"):
        service(unit_dir).install(launch(tmp_path), no_progress)
    assert existing.read_text() == "[Service]\nExecStart=/bin/true\n"
    assert service(unit_dir).exists("digest")


def test_a_missing_unit_directory_names_its_setting(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="IRIS_SYSTEMD_UNIT_DIR"):
        service(tmp_path / "missing").install(launch(tmp_path), no_progress)


def test_a_checkout_without_the_template_names_iris_repo_dir(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    with pytest.raises(ProvisionError, match="IRIS_REPO_DIR"):
        service(unit_dir, repo=tmp_path).install(launch(tmp_path), no_progress)
    assert list(unit_dir.iterdir()) == []


def test_removing_an_invalid_name_is_refused_before_any_path_is_built(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="cannot name a systemd unit"):
        service(tmp_path).remove("../../etc/passwd", no_progress)


@pytest.mark.parametrize("user", ["root", "0"])
def test_agents_never_run_as_root(tmp_path: Path, user: str) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    systemd = SystemdService(REPO, unit_dir, NO_SYSTEMCTL, journalctl=NO_SYSTEMCTL, user=user)
    steps: list[str] = []
    with pytest.raises(ProvisionError, match="must not run as root"):
        systemd.install(launch(tmp_path), steps.append)
    assert (steps, list(unit_dir.iterdir())) == ([], [])

"""Without a reachable dockerd or a terraform binary, spawn fails with a clear error before it
writes anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.docker_cli import check_docker
from iris_runtime.provision.terraform import Terraform
from tests.provisioning.docker_agents.agent_containers import IMAGE, make_launch

# The first test pays for the session's debootstrap tree (about a minute, more on a slow mirror)
# and the image build; the default per-test timeout is too short for that setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_docker_unavailable_is_a_clear_error(
    tmp_path: Path,
    docker_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody-listens.sock")
    with pytest.raises(ProvisionError, match="Docker daemon not reachable at unix://"):
        check_docker()
    agents = DockerAgents(
        docker_repo, tmp_path, IMAGE, "base", Terraform(docker_repo / "terraform"), None, ""
    )
    before = agents.agents_file.read_text()
    # What spawn asks before it registers the agent: nothing is written, not even the state dir.
    with pytest.raises(ProvisionError, match="Docker daemon not reachable"):
        agents.preflight("nodocker")
    assert not agents.state_dir.exists()
    with pytest.raises(InvalidInput):  # the name is checked first
        agents.preflight("No_Docker")
    launch = make_launch(tmp_path / "homes", "nodocker", "store", "")
    with pytest.raises(ProvisionError, match="Docker daemon not reachable"):
        agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert agents.agents_file.read_text() == before


def test_missing_terraform_is_a_clear_error(tmp_path: Path, docker_repo: Path) -> None:
    terraform = Terraform(docker_repo / "terraform", binary="/nonexistent/terraform")
    agents = DockerAgents(docker_repo, tmp_path, IMAGE, "base", terraform, None, "")
    before = agents.agents_file.read_text()
    with pytest.raises(ProvisionError, match=r"terraform not found.*install Terraform"):
        agents.preflight("noterraform")
    assert not agents.state_dir.exists()
    launch = make_launch(tmp_path / "homes", "noterraform", "store", "")
    with pytest.raises(ProvisionError, match=r"terraform not found.*install Terraform"):
        agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert agents.agents_file.read_text() == before
    assert os.environ.get("DOCKER_HOST")  # the session's daemon is untouched

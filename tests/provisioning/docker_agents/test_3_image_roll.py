"""A spawn after the image's sources changed builds the new image for the new agent only: the
others keep their containers until a full apply replaces exactly them."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.docker_cli import container_name, inspect_container
from iris_runtime.provision.terraform import Terraform
from tests.provisioning.docker_agents.agent_containers import (
    LONGEST_NAME,
    ROLL_IMAGE,
    make_launch,
    wait_healthy,
)
from tests.provisioning.dockerd import REPO, Dockerd

# The first test pays for the session's debootstrap tree (about a minute, more on a slow mirror)
# and the image build; the default per-test timeout is too short for that setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def image_id(dockerd: Dockerd, image: str) -> str:
    result = dockerd.docker("image", "inspect", "--format", "{{.Id}}", image)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_new_image_reaches_the_new_agent_only_until_a_full_apply(
    dockerd: Dockerd,
    docker_base_image: str,
    docker_repo: Path,
    tmp_path: Path,
) -> None:
    # A checkout of its own (hard links: instant), with an agents.tf of its own: a full apply
    # applies every block of agents.tf, and this test's state must not meet the other tests'.
    repo = tmp_path / "repo"
    shutil.copytree(docker_repo, repo, copy_function=os.link)
    (repo / "terraform" / "agents.tf").unlink()
    shutil.copy(REPO / "terraform" / "agents.tf", repo / "terraform" / "agents.tf")
    agents = DockerAgents(
        repo_dir=repo,
        data_dir=tmp_path / "parent",
        image=ROLL_IMAGE,
        base_image=docker_base_image,
        terraform=Terraform(repo / "terraform"),
        env_file=None,
        broker_url="http://127.0.0.1:3000",
    )
    homes = tmp_path / "homes"
    first = [make_launch(homes, name, "store", "") for name in ("my_agent", "9lives")]
    newest = make_launch(homes, LONGEST_NAME, "store", "")
    # A new file in the image's sources: part of its hash (iris_runtime/**) and build context.
    marker = repo / "iris_runtime" / "roll-test-marker.txt"
    try:
        for launch in first:
            agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
        old_image = image_id(dockerd, ROLL_IMAGE)
        before = {launch.name: inspect_container(container_name(launch.name)) for launch in first}

        marker.write_text(uuid.uuid4().hex)
        lines: list[str] = []
        agents.install(newest, secrets_mode="store", unique_token=True, progress=lines.append)
        print("\n".join(lines))
        assert any(ln.startswith("terraform_data.iris_runtime_image[0]: create") for ln in lines)
        new_image = image_id(dockerd, ROLL_IMAGE)
        assert new_image != old_image
        info = inspect_container(container_name(LONGEST_NAME))
        assert info is not None and info["Image"] == new_image
        # The others were not touched: same containers, still running the image they had.
        assert not any(
            ln.startswith(("module.agent_my_agent", "module.agent_9lives")) for ln in lines
        )
        for name, was in before.items():
            now = inspect_container(container_name(name))
            assert was is not None and now is not None
            assert (now["Id"], now["Image"]) == (was["Id"], old_image), name
            assert now["State"]["StartedAt"] == was["State"]["StartedAt"], f"{name} restarted"
        assert any(
            ln.startswith(f"note: 9lives, my_agent still run an older build of {ROLL_IMAGE}")
            for ln in lines
        )
        wait_healthy(newest)

        # The documented roll: a full apply replaces exactly the containers on the old image.
        lines.clear()
        agents.apply_all(lines.append)
        print("\n".join(lines))
        for name, was in before.items():
            now = inspect_container(container_name(name))
            assert was is not None and now is not None
            assert now["Id"] != was["Id"] and now["Image"] == new_image, name
        assert sorted(ln for ln in lines if ln.startswith("plan: ")) == [
            "plan: replace module.agent_9lives.terraform_data.container",
            "plan: replace module.agent_my_agent.terraform_data.container",
        ]
        assert agents.terraform.plan(var_files=[agents.var_file]) is False
    finally:
        for launch in [*first, newest]:
            agents.remove(launch.name, print)
    for launch in [*first, newest]:
        assert inspect_container(container_name(launch.name)) is None

"""The package's shared parent (``DockerAgents`` on the session's dockerd and checkout copy) and
the one store-mode agent installed on it, kept until the package's last test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.terraform import Terraform
from iris_runtime.testing.leaks import CommandLineSampler
from tests.provisioning.docker_agents.agent_containers import (
    IMAGE,
    PARENT_SECRETS,
    Installed,
    make_launch,
)
from tests.provisioning.dockerd import (  # noqa: F401  (fixtures)
    Dockerd,
    docker_base_image,
    docker_repo,
    dockerd,
)
from tests.provisioning.rootfs import debian_rootfs, require_root_and  # noqa: F401


@pytest.fixture(scope="package", autouse=True)
def _requirements() -> None:
    require_root_and("dockerd", "docker", "debootstrap", "terraform")


@pytest.fixture(scope="package")
def docker_agents(
    dockerd: Dockerd,  # noqa: F811
    docker_base_image: str,  # noqa: F811
    docker_repo: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> DockerAgents:
    data = tmp_path_factory.mktemp("docker-parent")
    env_file = data / ".env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in PARENT_SECRETS.items()) + "FROM_ENV_FILE=yes\n"
    )
    env_file.chmod(0o600)
    return DockerAgents(
        repo_dir=docker_repo,
        data_dir=data,
        image=IMAGE,
        base_image=docker_base_image,
        terraform=Terraform(docker_repo / "terraform"),
        env_file=env_file,
        broker_url="http://127.0.0.1:3000",
    )


@pytest.fixture(scope="package")
def store_agent(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """One store-mode agent with its own token: installing it builds the image too."""
    launch = make_launch(
        tmp_path_factory.mktemp("homes"), "digest", "store", "http://127.0.0.1:3000"
    )
    progress: list[str] = []
    with CommandLineSampler() as commands:
        token = docker_agents.install(
            launch, secrets_mode="store", unique_token=True, progress=progress.append
        )
    argv = {line.replace(b"\0", b" ").decode(errors="replace") for line in commands.seen}
    assert docker_agents.env_file is not None
    yield Installed(docker_agents, launch, token, progress, argv, docker_agents.env_file)
    docker_agents.remove(launch.name, progress.append)

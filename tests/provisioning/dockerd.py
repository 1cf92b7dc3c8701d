"""The private Docker daemon of the Docker-mode tests, and what they build on it.

One ``dockerd`` (:func:`iris_runtime.testing.dockerd.private_dockerd`: own socket, data root and
exec root, no bridge or iptables rules) runs per session under the session's temp dir, and
``DOCKER_HOST`` points the tests and everything they start at it. Nothing is ever pulled: the
base image is ``docker import`` of the debootstrap tree from ``rootfs.py``, and pip in the image
build installs from the session's wheelhouse (``tests/provisioning/wheelhouse.py``).

Fixtures: ``dockerd`` (session), ``docker_base_image`` (session), ``docker_repo`` (session: a copy
of the checkout to build from and to write ``terraform/agents.tf`` into, with the wheels of the
session's wheelhouse).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.dockerd import Dockerd, copy_checkout, import_rootfs, private_dockerd
from tests.provisioning.rootfs import require_root_and
from tests.provisioning.wheelhouse import (  # noqa: F401 (image_requirements: re-exported)
    image_requirements,
    link_wheels,
    session_wheelhouse,
)

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "iris-test-base:bookworm"


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dockerd]:
    """A private dockerd for this session; DOCKER_HOST points at it while the session runs."""
    require_root_and("dockerd", "docker")
    previous = os.environ.get("DOCKER_HOST")
    with private_dockerd(tmp_path_factory.mktemp("dockerd")) as daemon:
        os.environ["DOCKER_HOST"] = daemon.host
        try:
            yield daemon
        finally:
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous


@pytest.fixture(scope="session")
def docker_base_image(dockerd: Dockerd, debian_rootfs: Path) -> str:
    """The debootstrap tree as a local image (python3 + venv): the runtime image's base."""
    import_rootfs(dockerd, debian_rootfs, BASE_IMAGE, timeout=300)
    return BASE_IMAGE


@pytest.fixture(scope="session")
def docker_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (sources, Dockerfile, terraform/) with ``build/wheelhouse`` filled
    from the session's wheelhouse, so the image build inside dockerd needs no index. Tests write
    ``terraform/agents.tf`` here, never in the real checkout."""
    repo = tmp_path_factory.mktemp("docker-repo")
    copy_checkout(REPO, repo)
    # Only what the image installs: a large extra wheel would only slow every build context.
    wheels = session_wheelhouse(tmp_path_factory)
    link_wheels(wheels, repo / "build" / "wheelhouse", skip_extra=True)
    return repo

"""The private dockerd of the Docker tests (session-scoped), the docker level's image and a
container of it, and an Iris run unprivileged."""

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.provisioning.dockerd import Dockerd, dockerd  # noqa: F401 (a fixture, used by name)
from tests.sandbox.docker_image import import_image, start_container


@pytest.fixture
def unprivileged(tmp_path: Path) -> Iterator[tuple[Callable[..., IrisServer], Path]]:
    """``(start, folder)``: start an Iris that runs as an unprivileged user, with its files under
    ``folder``. The namespace level refuses to run as root (the host would check the command's
    file permissions as root), and CI runs as root: there Iris runs as nobody via setpriv."""
    if os.geteuid() != 0:
        plain: list[IrisServer] = []

        def start_plain(data_dir: Path, **env: str) -> IrisServer:
            plain.append(IrisServer(data_dir, env=env))
            return plain[-1].start()

        yield start_plain, tmp_path
        for server in plain:
            server.stop()
        return
    folder = Path(tempfile.mkdtemp(prefix="iris-unprivileged-"))
    folder.chmod(0o755)
    started: list[IrisServer] = []

    def start(data_dir: Path, **env: str) -> IrisServer:
        data_dir.mkdir(parents=True, exist_ok=True)
        for path in (folder, *folder.rglob("*")):
            os.lchown(path, NOBODY, NOBODY)
        started.append(_Unprivileged(data_dir, env={"HOME": str(folder), **env}))
        return started[-1].start()

    yield start, folder
    for server in started:
        server.stop()
    shutil.rmtree(folder, ignore_errors=True)


NOBODY = 65534


class _Unprivileged(IrisServer):
    def command(self) -> list[str]:
        drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return ["setpriv", *drop, *super().command()]


@pytest.fixture(scope="module")
def sandbox_image(dockerd: Dockerd) -> str:  # noqa: F811 (the fixture above)
    return import_image({**os.environ, "DOCKER_HOST": dockerd.host})


@pytest.fixture
def container(
    dockerd: Dockerd,  # noqa: F811 (the fixture above)
    sandbox_image: str,
    tmp_path: Path,
) -> Iterator[str]:
    name = f"iris-box-{tmp_path.name[-20:].strip('_')}"
    start_container({**os.environ, "DOCKER_HOST": dockerd.host}, name, tmp_path / "data" / "work")
    yield name
    dockerd.docker("rm", "-f", name)

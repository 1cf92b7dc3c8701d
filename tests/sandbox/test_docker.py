"""The docker:<container> level for real: the private dockerd of the Docker tests, a container
the test starts as an operator would, and a served Iris whose commands run in it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from tests.provisioning.dockerd import Dockerd
from tests.sandbox.docker_image import import_image, start_container
from tests.sandbox.support import assert_boundary, served_turn

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sandbox_image(dockerd: Dockerd) -> str:
    return import_image({**os.environ, "DOCKER_HOST": dockerd.host})


@pytest.fixture
def container(
    dockerd: Dockerd,
    sandbox_image: str,
    tmp_path: Path,
) -> Iterator[str]:
    name = f"iris-box-{tmp_path.name[-20:].strip('_')}"
    start_container({**os.environ, "DOCKER_HOST": dockerd.host}, name, tmp_path / "data" / "work")
    yield name
    dockerd.docker("rm", "-f", name)


def test_docker_boundary_seen_by_a_model_turn(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    container: str,
    dockerd: Dockerd,
) -> None:
    iris, report, results = served_turn(
        start_iris, tmp_path, f"docker:{container}", DOCKER_HOST=dockerd.host
    )
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"  # the container was started with --network none
    # The command really ran in the container: its hostname is the container's id.
    inspect = dockerd.docker("inspect", "-f", "{{.Config.Hostname}}", container)
    assert report["hostname"] == inspect.stdout.strip()


def test_a_stopped_container_stops_serve(
    tmp_path: Path,
    container: str,
    dockerd: Dockerd,
) -> None:
    dockerd.docker("stop", "-t", "0", container)
    env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "data"),
        IRIS_API_PORT=str(free_port()),
        DOCKER_HOST=dockerd.host,
    )
    result = run_iris("serve", "--sandbox", f"docker:{container}", env=env, timeout=60)
    assert result.returncode != 0
    assert f"container {container!r} is not running" in result.stderr


def test_a_container_without_the_work_folder_stops_serve(
    tmp_path: Path,
    dockerd: Dockerd,
    sandbox_image: str,
) -> None:
    name = "iris-box-elsewhere"
    start_container({**os.environ, "DOCKER_HOST": dockerd.host}, name, tmp_path / "elsewhere")
    try:
        env = clean_environment(
            IRIS_DATA_DIR=str(tmp_path / "data"),
            IRIS_API_PORT=str(free_port()),
            DOCKER_HOST=dockerd.host,
        )
        result = run_iris("serve", "--sandbox", f"docker:{name}", env=env, timeout=60)
    finally:
        dockerd.docker("rm", "-f", name)
    assert result.returncode != 0
    assert "must show the work folder at /workspace" in result.stderr


def test_timeout_kills_what_the_command_started_in_the_container(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    container: str,
    dockerd: Dockerd,
) -> None:
    command = {"command": "sleep 987 & sleep 986", "timeout": 1}
    iris = _scripted(
        start_iris,
        tmp_path,
        [[{"tool": "bash", "args": command}], [{"text": "ok"}]],
        IRIS_SANDBOX=f"docker:{container}",
        DOCKER_HOST=dockerd.host,
    )
    assert iris.post("/sessions/k/message", json_body={"text": "go"}).json()["text"] == "ok"
    top = dockerd.docker("top", container)  # the host's ps, for the container's processes
    assert top.returncode == 0, top.stderr
    assert "sleep infinity" in top.stdout  # the listing is real
    assert "sleep 98" not in top.stdout


def _scripted(
    start_iris: Callable[..., IrisServer], tmp_path: Path, turns: list[object], **env: str
) -> IrisServer:
    import json

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"when": "", "turns": turns}]}))
    return start_iris(
        tmp_path / "data",
        IRIS_LOAD_PLUGINS="scripted",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        **env,
    )

"""The docker:<container> level for real: the private dockerd of the Docker tests, a container
the test starts as an operator would, and a served Iris whose commands run in it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from iris_runtime.tools.sandbox.base import SandboxSpec
from iris_runtime.tools.sandbox.docker import DockerSandbox
from tests.provisioning.dockerd import Dockerd
from tests.sandbox.docker_image import start_container
from tests.sandbox.docker_level import one_command, serve_refused
from tests.sandbox.support import assert_boundary, served_turn
from tests.web.conftest import SSEReader

pytestmark = pytest.mark.timeout(300)

RunOne = Callable[[dict[str, object]], IrisServer]


@pytest.fixture
def run_one(
    tmp_path: Path, start_iris: Callable[..., IrisServer], container: str, dockerd: Dockerd
) -> RunOne:
    """Start an Iris in this test's container whose model runs the one bash command given."""
    return lambda args: one_command(start_iris, tmp_path, dockerd, container, args)


def processes_after_the_turn(iris: IrisServer, dockerd: Dockerd, container: str) -> str:
    """Run the turn, then list the container's processes (the host's ps, for the container)."""
    assert iris.post("/sessions/k/message", json_body={"text": "go"}).json()["text"] == "ok"
    top = dockerd.docker("top", container)
    assert top.returncode == 0, top.stderr
    # The listing is real, and the container's own process (root) is untouched.
    assert "sleep infinity" in top.stdout
    return top.stdout


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
    stderr = serve_refused(tmp_path, dockerd, container)
    assert f"container {container!r} is not running" in stderr


def test_timeout_kills_what_the_command_started_in_the_container(
    run_one: RunOne, container: str, dockerd: Dockerd
) -> None:
    iris = run_one({"command": "sleep 987 & sleep 986", "timeout": 1})
    assert "sleep 98" not in processes_after_the_turn(iris, dockerd, container)


def test_background_processes_end_with_the_command(
    run_one: RunOne, container: str, dockerd: Dockerd
) -> None:
    # One keeps the run's marker; the other drops it (a fresh environment) and is caught by the
    # sweep once no command runs.
    iris = run_one({"command": "sleep 977 & env -i /bin/sleep 976 & echo started"})
    processes = processes_after_the_turn(iris, dockerd, container)
    assert "sleep 977" not in processes
    assert "sleep 976" not in processes


def test_a_run_in_flight_survives_another_runs_end(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    container: str,
    dockerd: Dockerd,
) -> None:
    """While one command runs, another's end kills only its own leftovers (by its marker), and
    never the command in flight; the sweep waits until both are done."""
    script = tmp_path / "script.json"
    rules = [
        {"when": "long", "turns": [[{"tool": "bash", "args": {"command": "sleep 974"}}]]},
        {
            "when": "short",
            "turns": [
                [{"tool": "bash", "args": {"command": "sleep 973 & echo left"}}],
                [{"text": "short done"}],
            ],
        },
    ]
    script.write_text(json.dumps({"rules": rules}))
    iris = start_iris(
        tmp_path / "data",
        IRIS_LOAD_PLUGINS="scripted",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_SANDBOX=f"docker:{container}",
        DOCKER_HOST=dockerd.host,
    )
    with ThreadPoolExecutor(1) as pool:
        long_run = pool.submit(iris.post, "/sessions/a/message", json_body={"text": "long"})
        deadline = time.monotonic() + 30
        while "sleep 974" not in dockerd.docker("top", container).stdout:
            assert time.monotonic() < deadline, "the long command never started"
            time.sleep(0.2)
        reply = iris.post("/sessions/b/message", json_body={"text": "short"})
        assert reply.json()["text"] == "short done"
        top = dockerd.docker("top", container).stdout
        assert "sleep 973" not in top  # its own leftover, by the marker
        assert "sleep 974" in top  # the other run, still in flight
        iris.post("/sessions/a/stop", json_body={})
        long_run.result(timeout=60)
    assert "sleep 974" not in dockerd.docker("top", container).stdout


def test_a_container_recreated_under_the_same_name_gets_no_command(
    tmp_path: Path, run_one: RunOne, container: str, dockerd: Dockerd
) -> None:
    iris = run_one({"command": "touch /tmp/reached; echo reached"})
    dockerd.docker("rm", "-f", container)
    docker_env = {**os.environ, "DOCKER_HOST": dockerd.host}
    start_container(docker_env, container, tmp_path / "data" / "work")
    stream = SSEReader(iris, "k")
    assert iris.post("/sessions/k/message", json_body={"text": "go"}).json()["text"] == "ok"
    stream.wait_for(lambda events: any(e["event"] == "final" for e in events))
    stream.close()
    ended = [e for e in stream.events if e["event"] == "tool" and e["phase"] == "end"]
    assert ended[0]["isError"] and "reached" not in ended[0]["result"]
    assert dockerd.docker("exec", container, "ls", "/tmp/reached").returncode != 0


def test_the_docker_client_keeps_iris_home_and_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, container: str, dockerd: Dockerd
) -> None:
    """The client reads its configuration (credential helpers run programs) from Iris's own
    HOME, never from the command's; the command's HOME still reaches the container, and no
    value but PATH's and HOME's is on the command line."""
    monkeypatch.setenv("HOME", str(tmp_path / "iris-home"))
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    sandbox = DockerSandbox(SandboxSpec("docker", container, tmp_path / "data"), "/usr/bin/docker")
    sandbox.check()
    token = "run-token-" + "x" * 20
    env = {"PATH": "/bin", "HOME": "/workspace", "IRIS_API_TOKEN": token, "DOCKER_AUTH": "no"}
    launch = sandbox.launch(["id"], "/workspace", env)
    try:
        assert launch.env["HOME"] == str(tmp_path / "iris-home")
        assert launch.env["DOCKER_CONFIG"] == str(tmp_path / "iris-home" / ".docker")
        assert launch.env["IRIS_API_TOKEN"] == token  # forwarded by name
        assert "DOCKER_AUTH" not in launch.env  # the command's DOCKER_* are dropped
        pairs = list(zip(launch.argv[::2], launch.argv[1::2], strict=False))
        assert ("-e", "HOME=/workspace") in pairs
        assert ("-e", "IRIS_API_TOKEN") in pairs
        assert not any(token in arg or "DOCKER_AUTH" in arg for arg in launch.argv)
        # By the id Iris checked, not the name a re-created container could take.
        inspect = dockerd.docker("inspect", "-f", "{{.Id}}", container).stdout.strip()
        assert inspect in launch.argv and container not in launch.argv
    finally:
        assert launch.cleanup is not None
        launch.cleanup()

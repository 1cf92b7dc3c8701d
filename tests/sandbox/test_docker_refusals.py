"""The docker level refuses a container whose configuration would hand its commands the host,
read from ``docker inspect`` before any command runs, and accepts the mounts it allows."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.provisioning.dockerd import Dockerd
from tests.sandbox.docker_image import start_container
from tests.sandbox.docker_level import one_command, serve_refused
from tests.sandbox.support import scripted
from tests.web.conftest import SSEReader

pytestmark = pytest.mark.timeout(300)


def test_a_container_without_the_work_folder_stops_serve(
    tmp_path: Path,
    dockerd: Dockerd,
    sandbox_image: str,
) -> None:
    name = "iris-box-elsewhere"
    start_container({**os.environ, "DOCKER_HOST": dockerd.host}, name, tmp_path / "elsewhere")
    assert "must show the work folder at /workspace" in serve_refused(tmp_path, dockerd, name)


# (docker run flags, the reason Iris gives); "{data}" is Iris's data folder.
REFUSED_CONTAINERS = {
    "privileged": (["--privileged"], "it runs --privileged"),
    "pid-host": (["--pid", "host"], "it shares the PID namespace of host (--pid host)"),
    "ipc-host": (["--ipc", "host"], "it shares the IPC namespace of host (--ipc host)"),
    "sys-admin": (["--cap-add", "SYS_ADMIN"], "it adds the capabilities SYS_ADMIN"),
    "net-admin": (["--cap-add", "NET_ADMIN"], "it adds the capabilities NET_ADMIN"),
    "device": (["--device", "/dev/null:/dev/extra"], "it has host devices (--device)"),
    "unconfined": (
        ["--security-opt", "seccomp=unconfined"],
        "it runs with seccomp=unconfined",
    ),
    "user-10000": (["--user", "10000"], "its own user is 10000, the commands' uid"),
    "agent-writable": (
        ["-v", "{data}/MEMORY.md:/agent/MEMORY.md"],
        "/agent/MEMORY.md must be a read-only bind mount (mount it :ro)",
    ),
    "agent-tmpfs": (["--tmpfs", "/agent/x"], "/agent/x must be a read-only bind mount"),
    "data-dir": (["-v", "{data}:/srv/iris:ro"], "/srv/iris shows Iris's data folder ({data})"),
    "host-root": (["-v", "/:/host:ro"], "/host shows Iris's data folder (/)"),
    "registry": (
        ["-v", "{data}/agents.json:/etc/agents.json:ro"],
        "/etc/agents.json shows {data}/agents.json, inside Iris's data folder",
    ),
    "work-subfolder": (
        ["-v", "{data}/work/sub:/sub"],
        "/sub shows {data}/work/sub inside the work folder (commands can swap it)",
    ),
    "host-folder": (
        ["-v", "/etc:/hostetc:ro"],
        "/hostetc shows the host's /etc: only the work folder at /workspace",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_CONTAINERS))
def test_a_container_that_hands_commands_the_host_stops_serve(
    tmp_path: Path,
    dockerd: Dockerd,
    sandbox_image: str,
    case: str,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("MEMORY.md", "agents.json"):
        (data / name).write_text("{}")
    (data / "work" / "sub").mkdir(parents=True)
    flags, reason = REFUSED_CONTAINERS[case]
    name = f"iris-box-refused-{case}"
    extra = [flag.format(data=data) for flag in flags]
    # Created, not started: --privileged cannot start on every host, and the configuration is
    # what Iris reads (it is refused before it is found stopped).
    docker_env = {**os.environ, "DOCKER_HOST": dockerd.host}
    start_container(docker_env, name, data / "work", *extra, start=False)
    stderr = serve_refused(tmp_path, dockerd, name)
    assert f"container {name!r} would hand commands the host: " in stderr
    assert reason.format(data=data) in stderr


def test_a_container_without_no_new_privileges_stops_serve(
    tmp_path: Path, dockerd: Dockerd, sandbox_image: str
) -> None:
    name = "iris-box-nnp"
    docker_env = {**os.environ, "DOCKER_HOST": dockerd.host}
    start_container(docker_env, name, tmp_path / "data" / "work", no_new_privileges=False)
    stderr = serve_refused(tmp_path, dockerd, name)
    assert "it lacks --security-opt no-new-privileges" in stderr


def test_a_volume_that_binds_a_host_folder_stops_serve(
    tmp_path: Path, dockerd: Dockerd, sandbox_image: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    volume = "iris-box-disguised"
    made = dockerd.docker(
        "volume", "create", "--driver", "local", "-o", "type=none", "-o", "o=bind",
        "-o", f"device={data}", volume,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    name = "iris-box-volume"
    docker_env = {**os.environ, "DOCKER_HOST": dockerd.host}
    try:
        start_container(docker_env, name, data / "work", "-v", f"{volume}:/data", start=False)
        stderr = serve_refused(tmp_path, dockerd, name)
    finally:
        dockerd.docker("volume", "rm", "-f", volume)
    assert f"/data is a volume that binds the host's {data}" in stderr


def test_an_allowed_bind_is_accepted(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    dockerd: Dockerd,
    sandbox_image: str,
) -> None:
    shared = tmp_path / "reference"
    shared.mkdir()
    (shared / "notes.txt").write_text("tide tables\n")
    name = "iris-box-allowed"
    docker_env = {**os.environ, "DOCKER_HOST": dockerd.host}
    start_container(docker_env, name, tmp_path / "data" / "work", "-v", f"{shared}:/ref:ro")
    try:
        command = {"command": "cat /ref/notes.txt > seen.txt"}
        iris = one_command(
            start_iris,
            tmp_path,
            dockerd,
            name,
            command,
            IRIS_DOCKER_ALLOWED_BINDS=str(shared),
        )
        assert iris.post("/sessions/k/message", json_body={"text": "go"}).json()["text"] == "ok"
        assert (tmp_path / "data" / "work" / "seen.txt").read_text() == "tide tables\n"
    finally:
        dockerd.docker("rm", "-f", name)


def test_the_engine_socket_bound_in_stops_serve(
    tmp_path: Path,
    dockerd: Dockerd,
    sandbox_image: str,
) -> None:
    socket = dockerd.host.removeprefix("unix://")
    name = "iris-box-socket"
    data = tmp_path / "data"
    start_container(
        {**os.environ, "DOCKER_HOST": dockerd.host},
        name,
        data / "work",
        "-v",
        f"{Path(socket).parent}:/run/engine",
    )
    stderr = serve_refused(tmp_path, dockerd, name)
    assert f"/run/engine shows the container engine's socket ({Path(socket).parent})" in stderr


def test_read_only_identity_mounts_are_accepted_and_shown(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    dockerd: Dockerd,
    sandbox_image: str,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "MEMORY.md").write_text("remember the tides\n")
    name = "iris-box-identity"
    start_container(
        {**os.environ, "DOCKER_HOST": dockerd.host},
        name,
        data / "work",
        "-v",
        f"{data / 'MEMORY.md'}:/agent/MEMORY.md:ro",
    )
    try:
        turns = [
            [{"tool": "read", "args": {"path": "/agent/MEMORY.md"}, "id": "memory"}],
            [{"text": "ok"}],
        ]
        iris = scripted(
            start_iris,
            tmp_path,
            turns,
            IRIS_SANDBOX=f"docker:{name}",
            DOCKER_HOST=dockerd.host,
        )
        stream = SSEReader(iris, "k")
        assert iris.post("/sessions/k/message", json_body={"text": "go"}).json()["text"] == "ok"
        stream.wait_for(lambda events: any(e["event"] == "final" for e in events))
        stream.close()
        ended = [e for e in stream.events if e["event"] == "tool" and e["phase"] == "end"]
        assert not ended[0]["isError"]
        assert "remember the tides" in ended[0]["result"]
    finally:
        dockerd.docker("rm", "-f", name)

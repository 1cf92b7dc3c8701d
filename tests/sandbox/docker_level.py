"""An Iris at the docker level whose scripted model runs one command, and ``iris serve`` refusing
a container (the fixtures, the sandbox image and a container started as an operator would, are
in this folder's conftest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from tests.provisioning.dockerd import Dockerd
from tests.sandbox.support import scripted


def one_command(
    start_iris: Callable[..., IrisServer],
    tmp_path: Path,
    dockerd: Dockerd,
    container: str,
    args: dict[str, object],
    **env: str,
) -> IrisServer:
    """Iris at ``docker:<container>`` whose model runs one bash command, then says "ok"."""
    turns = [[{"tool": "bash", "args": args}], [{"text": "ok"}]]
    level = {"IRIS_SANDBOX": f"docker:{container}", "DOCKER_HOST": dockerd.host}
    return scripted(start_iris, tmp_path, turns, **level, **env)


def serve_refused(tmp_path: Path, dockerd: Dockerd, name: str, **env: str) -> str:
    """``iris serve`` at ``docker:<name>`` fails; its stderr. The container is removed after."""
    cli_env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "data"),
        IRIS_API_PORT=str(free_port()),
        DOCKER_HOST=dockerd.host,
        **env,
    )
    try:
        result = run_iris("serve", "--sandbox", f"docker:{name}", env=cli_env, timeout=60)
    finally:
        dockerd.docker("rm", "-f", name)
    assert result.returncode != 0
    return result.stderr

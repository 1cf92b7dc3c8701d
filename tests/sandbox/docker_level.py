"""An Iris at the docker level whose scripted model runs one command (the fixtures, the sandbox
image and a container started as an operator would, are in this folder's conftest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer
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

"""A scripted model turn through a served Iris: the boundary seen from the model's side.

The turn runs one bash command that writes what it sees (uid, hostname, network links, whether it
can write outside the workspace or read Iris's data folder) to ``report.txt`` in its workspace,
then asks the ``read`` tool for Iris's token by its host path. The test reads the report from the
host's work folder and the tool results from the session log.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.server import IrisServer
from tests.web.conftest import SSEReader

PROBE_COMMAND = r"""
exec > report.txt 2>&1
echo "uid=$(id -u)"
echo "hostname=$(hostname)"
echo "links=$(ip -o link | cut -d: -f2 | tr -d ' ' | cut -d@ -f1 | tr '\n' ,)"
if echo escaped > "$DATA/escape.txt"; then echo write_data=ok; else echo write_data=refused; fi
if touch /usr/escape-$$ 2>/dev/null; then echo write_usr=ok; else echo write_usr=refused; fi
if cat "$DATA/api-token" >/dev/null 2>&1; then echo read_token=ok; else echo read_token=refused; fi
if [ -e "$DATA" ]; then echo data_visible=yes; else echo data_visible=no; fi
if cat /etc/shadow >/dev/null 2>&1; then echo read_shadow=ok; else echo read_shadow=refused; fi
echo "pwd=$(pwd)"
"""


def require_tools(*tools: str) -> None:
    """Skip with the reason where a level's binary is missing (CI installs it from apt)."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (make test installs it on Debian)")


def scripted(
    start_iris: Callable[..., IrisServer], folder: Path, turns: list[object], **env: str
) -> IrisServer:
    """Iris with its data in ``folder/data`` whose scripted model plays ``turns`` (written to
    ``folder/script.json``) on any message."""
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [{"when": "", "turns": turns}]}))
    return start_iris(
        folder / "data",
        IRIS_LOAD_PLUGINS="scripted",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        **env,
    )


def boundary_turn(tmp_path: Path, data_dir: Path) -> Path:
    """A script: the probe command, then ``read`` of Iris's token file by its host path."""
    command = f"DATA={data_dir}\n{PROBE_COMMAND}"
    turns = [
        [{"tool": "bash", "args": {"command": command}, "id": "probe"}],
        [{"tool": "read", "args": {"path": str(data_dir / "api-token")}, "id": "token"}],
        [{"tool": "read", "args": {"path": "/workspace/report.txt"}, "id": "report"}],
        [{"text": "done"}],
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"when": "", "turns": turns}]}))
    return script


def served_turn(
    start_iris: Callable[..., IrisServer], tmp_path: Path, level: str, **env: str
) -> tuple[IrisServer, dict[str, str], dict[str, dict[str, Any]]]:
    """Serve Iris at ``level`` and play the turn: (server, the command's report, tool results
    by call id as the SSE stream showed them)."""
    data_dir = tmp_path / "data"
    settings = {"IRIS_LOAD_PLUGINS": "scripted", **env}
    iris = start_iris(
        data_dir,
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(boundary_turn(tmp_path, data_dir)),
        IRIS_SANDBOX=level,
        **settings,
    )
    stream = SSEReader(iris, "box")
    reply = iris.post("/sessions/box/message", json_body={"text": "go"})
    assert reply.json()["text"] == "done", reply.body
    stream.wait_for(lambda events: any(e["event"] == "final" for e in events))
    stream.close()
    results = {e["id"]: e for e in stream.events if e["event"] == "tool" and e["phase"] == "end"}
    report_file = data_dir / "work" / "report.txt"
    lines = report_file.read_text().splitlines()
    return iris, dict(line.split("=", 1) for line in lines if "=" in line), results


def assert_boundary(data_dir: Path, report: dict[str, str], results: dict[str, Any]) -> None:
    """What every isolating level shows: uid 10000, no host state, nothing written outside."""
    assert report["uid"] == "10000"
    assert report["pwd"] == "/workspace"
    assert report["write_data"] == "refused"
    assert report["read_token"] == "refused"
    assert report["data_visible"] == "no"
    assert report["read_shadow"] == "refused"  # root-only: the command is not host root
    assert not (data_dir / "escape.txt").exists()
    token = results["token"]
    assert token["isError"] and "outside the workspace" in token["result"]
    assert not results["report"]["isError"] and "uid=10000" in results["report"]["result"]

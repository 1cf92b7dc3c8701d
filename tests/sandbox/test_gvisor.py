"""The gvisor level (runsc, ptrace platform here) for real, through a served Iris."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.sandbox.support import assert_boundary, require_tools, served_turn


def _require_runsc() -> None:
    if os.geteuid() != 0:
        pytest.skip("runsc runs as root")
    require_tools("runsc", "ip")


def test_gvisor_boundary_seen_by_a_model_turn(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    _require_runsc()
    iris, report, results = served_turn(start_iris, tmp_path, "gvisor:ptrace")
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"
    assert report["write_usr"] == "refused"
    # Every run's bundle is gone when its command ended.
    assert list((iris.data_dir / "run" / "gvisor" / "bundles").iterdir()) == []


def test_doctor_probes_gvisor_with_the_platform_it_detects(tmp_path: Path) -> None:
    _require_runsc()
    (tmp_path / "data").mkdir(mode=0o700)
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_SANDBOX="gvisor")
    done = run_iris("doctor", "--sandbox", "--json", env=env, timeout=120)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["sandbox_probe"]["status"] == "ok", checks["sandbox_probe"]
    assert "uid 10000" in checks["sandbox_probe"]["detail"]
    detected = (tmp_path / "data" / "run" / "gvisor" / "platform").read_text()
    assert detected in {"ptrace", "kvm"}
    assert f"using the {detected} platform" in done.stderr


def test_attachments_are_shown_where_the_command_and_tools_see_them(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """At an isolated level the user's attachments are copied into the work folder and the
    model is told the paths the command (and the read tool) use, never the host's."""
    _require_runsc()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": []}))  # no rule: the reply echoes the prompt
    iris = start_iris(
        tmp_path / "data",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_LOAD_PLUGINS="scripted",
        IRIS_SANDBOX="gvisor:ptrace",
    )
    handle = iris.post(
        "/sessions/a1/attachments", body=b"attached text\n", headers={"X-Filename": "notes.txt"}
    ).json()["local"]
    reply = iris.post(
        "/sessions/a1/message", json_body={"text": "read", "attachments": [{"local": handle}]}
    ).json()["text"]
    inside = f"/workspace/.iris/attachments/{handle}"
    assert inside in reply and str(iris.data_dir / handle) not in reply, reply
    copied = iris.data_dir / "work" / ".iris" / "attachments" / handle
    assert copied.read_text() == "attached text\n"

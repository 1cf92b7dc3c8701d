"""`iris doctor` through the real command: effective config, masked secrets, real checks."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from iris_runtime.testing.server import clean_environment, run_iris

TOKEN = "doctor-secret-token-value-1234567890"


def doctor(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="", **env)
    return run_iris("doctor", *args, env=base, timeout=60)


def checks(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_doctor_masks_the_token_everywhere(tmp_path: Path) -> None:
    for args in ((), ("--json",)):
        result = doctor(tmp_path, *args, IRIS_API_TOKEN=TOKEN)
        assert TOKEN not in result.stdout + result.stderr
        assert "****7890" in result.stdout


def test_doctor_reports_effective_settings_and_passes_on_a_fresh_install(tmp_path: Path) -> None:
    result = doctor(tmp_path, "--json", IRIS_API_PORT="3999", IRIS_MAX_TURNS="7")
    assert result.returncode == 0, result.stdout
    settings = json.loads(result.stdout)["settings"]
    assert settings["api_port"] == 3999 and settings["max_turns"] == 7
    assert settings["data_dir"] == str((tmp_path / "data").resolve())
    assert checks(result)["provider"]["status"] == "ok"


def test_doctor_flags_a_busy_port_a_loose_data_dir_and_an_unknown_provider(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "api-token").write_text("x" * 40)
    (data / "api-token").chmod(0o644)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = doctor(
            tmp_path, "--json", IRIS_API_PORT=str(port), IRIS_PROVIDER="gpt-nonexistent"
        )
    found = checks(result)
    assert result.returncode == 1
    assert (
        found["IRIS_API_PORT"]["status"] == "warn"
        and "already running" in found["IRIS_API_PORT"]["detail"]
    )
    assert found["data_dir"]["status"] == "warn" and "755" in found["data_dir"]["detail"]
    assert found["token_file"]["status"] == "fail"
    assert found["provider"]["status"] == "fail" and "offline" in found["provider"]["detail"]


def test_doctor_explains_a_bad_setting(tmp_path: Path) -> None:
    result = doctor(tmp_path, IRIS_API_PORT="not-a-port")
    assert result.returncode != 0
    assert "IRIS_API_PORT must be an integer" in result.stderr
    assert "Traceback" not in result.stderr

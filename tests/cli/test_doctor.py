"""`iris doctor` through the real command: effective config, masked secrets, real checks."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from iris_runtime.testing.server import clean_environment, free_port, run_iris

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


def test_doctor_reports_how_agents_would_be_spawned(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    found = checks(
        doctor(tmp_path, "--json", IRIS_REPO_DIR=str(repo), IRIS_AGENT_PORTS="5000-5009")
    )
    assert found["spawn"]["status"] == "ok"
    assert "bridge ports 5000-5009" in found["spawn"]["detail"]

    found = checks(doctor(tmp_path, "--json", IRIS_REPO_DIR=str(tmp_path / "nowhere")))
    assert found["spawn"]["status"] == "warn" and "IRIS_REPO_DIR" in found["spawn"]["detail"]

    for name, value in (("IRIS_AGENT_PORTS", "lots"), ("IRIS_SUPERVISOR_BACKOFF_MS", "soon")):
        result = doctor(tmp_path, "--json", **{name: value})
        assert result.returncode == 1
        assert checks(result)["spawn"]["status"] == "fail"
        assert name in checks(result)["spawn"]["detail"]


def test_serve_refuses_a_bad_supervisor_backoff_before_starting(tmp_path: Path) -> None:
    env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "data"),
        IRIS_API_PORT=str(free_port()),
        IRIS_SUPERVISOR_BACKOFF_MS="-5",
    )
    result = run_iris("serve", env=env, timeout=60)
    assert result.returncode != 0
    assert "IRIS_SUPERVISOR_BACKOFF_MS" in result.stderr

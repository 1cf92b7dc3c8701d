"""``iris --env-file PATH``: settings from a file, winning over the environment, before anything
reads the configuration; a file that cannot be used stops the command (exit 2) without showing
any value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iris_runtime.cli.env_file import env_file_in_argv
from iris_runtime.testing.server import clean_environment, run_iris

SECRET = "sk-do-not-print-0123456789"


def registry_with(data: Path, name: str) -> Path:
    data.mkdir(mode=0o700)
    entry = {name: {"bridge_url": "http://127.0.0.1:4999", "secrets": []}}
    (data / "agents.json").write_text(json.dumps(entry))
    return data


def listed(stdout: str) -> list[str]:
    return [agent["name"] for agent in json.loads(stdout)]


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_values_load_and_override_the_environment(tmp_path: Path, form: str) -> None:
    wanted = registry_with(tmp_path / "wanted", "from-file")
    other = registry_with(tmp_path / "other", "from-environment")
    env_file = tmp_path / "iris.env"
    env_file.write_text(
        f"# the service's settings\n\nexport IRIS_DATA_DIR='{wanted}'\nIRIS_API_TOKEN={SECRET}\n"
    )
    option = ["--env-file", str(env_file)] if form == "separate" else [f"--env-file={env_file}"]
    env = clean_environment(IRIS_DATA_DIR=str(other))
    done = run_iris(*option, "agents", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == ["from-file"]
    # Without the option the inherited environment applies.
    assert listed(run_iris("agents", "list", "--json", env=env).stdout) == ["from-environment"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (f"IRIS_DATA_DIR=/tmp\n{SECRET}\n", "line 2 is not KEY=VALUE"),
        (f"1BAD={SECRET}\n", "line 1 is not KEY=VALUE"),
        (b"IRIS_X=\xff\n", "not UTF-8"),
    ],
)
def test_an_unusable_file_is_a_clear_error(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    env_file = tmp_path / "iris.env"
    if isinstance(content, bytes):
        env_file.write_bytes(content)
    elif content is not None:
        env_file.write_text(content)
    done = run_iris("--env-file", str(env_file), "agents", "list", env=clean_environment())
    assert done.returncode == 2
    assert message in done.stderr and str(env_file) in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_shown_in_help() -> None:
    done = run_iris("--help", env=clean_environment())
    assert "--env-file PATH" in done.stdout


def test_only_options_before_the_subcommand_count() -> None:
    assert env_file_in_argv(["--env-file", "a", "agents", "list"]) == Path("a")
    assert env_file_in_argv(["--env-file=b", "doctor"]) == Path("b")
    # After the subcommand it belongs to the subcommand (which has no such option).
    assert env_file_in_argv(["agents", "--env-file", "c"]) is None
    assert env_file_in_argv(["--env-file"]) is None  # click reports the missing value


def test_plugin_commands_are_found_with_the_files_settings(tmp_path: Path) -> None:
    """Plugin commands are discovered from the configuration before click parses argv: the
    file must already be in effect then."""
    fixture = Path(__file__).resolve().parents[1] / "plugin_fixture"
    env = clean_environment(
        PYTHONPATH=str(fixture), IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="none"
    )
    env_file = tmp_path / "iris.env"
    env_file.write_text("IRIS_LOAD_PLUGINS=probe\n")
    assert "probe-hello" not in run_iris("--help", env=env).stdout
    assert "probe-hello" in run_iris("--env-file", str(env_file), "--help", env=env).stdout

"""``iris agents spawn`` refusing bad requests through the real command, and leaving nothing behind:
no registry entry, no home, no held port."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import iris_runtime
from iris_runtime.testing.server import clean_environment, free_port, run_iris

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    return path


def spawn(data_dir: Path, *args: str, **env: str) -> tuple[int, str]:
    done = run_iris(
        "agents",
        "spawn",
        *args,
        env=clean_environment(
            **{
                "IRIS_DATA_DIR": str(data_dir),
                "IRIS_REPO_DIR": str(REPO_DIR),
                "IRIS_SERVICE_MANAGER": "process",
                **env,
            }
        ),
    )
    return done.returncode, done.stdout + done.stderr


def assert_nothing_left(data_dir: Path, name: str) -> None:
    registry = data_dir / "agents.json"
    entries = json.loads(registry.read_text()) if registry.exists() else {}
    assert name not in entries
    assert not (data_dir / "agents" / name).exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Bad Name", "invalid agent name"),
        ("../escape", "invalid agent name"),
        ("-dash", "invalid agent name"),
        ("x" * 64, "invalid agent name"),
        ("iris", "reserved"),
    ],
)
def test_invalid_names_are_refused(data_dir: Path, name: str, message: str) -> None:
    code, output = spawn(data_dir, "--", name)
    assert code != 0
    assert message in output
    assert "Traceback" not in output
    assert not (data_dir / "agents").exists() or not any((data_dir / "agents").iterdir())


def test_a_registered_name_is_refused_and_its_entry_kept(data_dir: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(data_dir))
    assert run_iris("agents", "register", "taken", "http://127.0.0.1:4999", env=env).returncode == 0
    before = (data_dir / "agents.json").read_bytes()
    code, output = spawn(data_dir, "taken")
    assert code != 0 and "already registered" in output
    assert (data_dir / "agents.json").read_bytes() == before
    assert not (data_dir / "agents" / "taken").exists()


def test_an_unknown_skill_names_what_is_available(data_dir: Path) -> None:
    code, output = spawn(data_dir, "digest", "--skill", "get-secret", "--skill", "no-such-skill")
    assert code != 0
    assert "unknown skill(s): no-such-skill" in output
    assert "get-secret" in output.split("available:")[1]  # the installed plugin skill
    assert_nothing_left(data_dir, "digest")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_an_exhausted_port_range_is_a_clear_error(data_dir: Path, busy_port: int) -> None:
    code, output = spawn(data_dir, "digest", IRIS_AGENT_PORTS=f"{busy_port}-{busy_port}")
    assert code != 0
    assert f"no free bridge port in {busy_port}-{busy_port}" in output
    assert_nothing_left(data_dir, "digest")


def test_a_port_range_used_by_registered_agents_is_exhausted(data_dir: Path) -> None:
    port = free_port()
    env = clean_environment(IRIS_DATA_DIR=str(data_dir))
    url = f"http://127.0.0.1:{port}"
    assert run_iris("agents", "register", "first", url, env=env).returncode == 0
    code, output = spawn(data_dir, "second", IRIS_AGENT_PORTS=f"{port}-{port}")
    assert code != 0 and "no free bridge port" in output
    assert_nothing_left(data_dir, "second")


def test_a_missing_scaffold_rolls_the_registration_back(data_dir: Path, tmp_path: Path) -> None:
    code, output = spawn(data_dir, "digest", IRIS_REPO_DIR=str(tmp_path / "not-a-checkout"))
    assert code != 0
    assert "no agent scaffold" in output and "IRIS_REPO_DIR" in output
    assert_nothing_left(data_dir, "digest")


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("ANTHROPIC_API_KEY=sk-live", "looks like a credential"),
        ("AGENT_NAME=other", "set by spawn itself"),
        ("lower=x", "not an environment variable name"),
        ("NOEQUALS", "is not NAME=VALUE"),
        # Root reads what a unit's LoadCredential= names: only spawn's own TLS key may be one.
        ("IRIS_TLS_KEY=/etc/shadow", "set by spawn itself"),
        ("CREDENTIALS_DIRECTORY=/root", "set by spawn itself"),
        ("LD_PRELOAD=/tmp/x.so", "changes what code the agent loads"),
        ("PYTHONPATH=/tmp/py", "changes what code the agent loads"),
    ],
)
def test_env_settings_that_are_credentials_or_identity_are_refused(
    data_dir: Path, pair: str, message: str
) -> None:
    code, output = spawn(data_dir, "digest", "--env", pair)
    assert code != 0 and message in output
    assert "sk-live" not in output
    assert_nothing_left(data_dir, "digest")


def test_systemd_is_refused_where_it_is_not_running(data_dir: Path) -> None:
    if Path("/run/systemd/system").is_dir():
        pytest.skip("this host runs systemd")
    code, output = spawn(data_dir, "digest", "--service-manager", "systemd")
    assert code != 0 and "systemd is not running" in output
    assert_nothing_left(data_dir, "digest")


def test_process_mode_without_a_running_iris_is_refused(data_dir: Path) -> None:
    code, output = spawn(data_dir, "digest")
    assert code != 0
    assert "needs a running Iris" in output
    assert_nothing_left(data_dir, "digest")


def test_docker_mode_without_a_docker_engine_leaves_nothing(data_dir: Path, tmp_path: Path) -> None:
    code, output = spawn(
        data_dir, "boxed", "--mode", "docker", DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock"
    )
    assert code != 0
    assert "Docker" in output and "Traceback" not in output
    assert "registered" not in output  # refused before anything was changed
    assert_nothing_left(data_dir, "boxed")


def test_docker_mode_without_terraform_says_how_to_get_it(data_dir: Path, tmp_path: Path) -> None:
    code, output = spawn(
        data_dir, "boxed", "--mode", "docker", IRIS_TERRAFORM_BIN=str(tmp_path / "no-terraform")
    )
    assert code != 0
    assert "terraform" in output.lower() and "Traceback" not in output
    assert "registered" not in output
    assert_nothing_left(data_dir, "boxed")


def test_a_skill_linking_outside_itself_is_refused(data_dir: Path, tmp_path: Path) -> None:
    skill = data_dir / "skills" / "leaky"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: leaky\ndescription: x\n---\n")
    (data_dir / "secrets").mkdir()
    (skill / "loot").symlink_to(data_dir / "secrets")
    code, output = spawn(data_dir, "digest", "--skill", "leaky")
    assert code != 0 and "links outside the skill" in output
    assert_nothing_left(data_dir, "digest")

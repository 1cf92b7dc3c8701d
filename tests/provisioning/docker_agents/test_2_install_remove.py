"""Installs and removals on the shared parent: an env-mode agent gets the env file but never the
parent's chat tokens, remove takes the container away, a failed apply rolls back, and preflight
refuses a name Docker cannot use before anything is written."""

from __future__ import annotations

import pytest

from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.docker_cli import container_state, inspect_container
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch
from tests.provisioning.docker_agents.agent_containers import (
    LONGEST_NAME,
    PARENT_SECRETS,
    make_launch,
    wait_healthy,
)

# The first test pays for the session's debootstrap tree (about a minute, more on a slow mirror)
# and the image build; the default per-test timeout is too short for that setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_env_mode_gets_the_env_file_but_never_the_parent_chat_tokens(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(tmp_path_factory.mktemp("homes"), "envy", "env", "")
    token = docker_agents.install(launch, secrets_mode="env", unique_token=False, progress=print)
    try:
        assert token is None  # the shared token from the env file
        wait_healthy(launch)
        info = inspect_container("iris-agent-envy")
        assert info is not None
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert env["FROM_ENV_FILE"] == "yes"
        for name in PLATFORM_TOKEN_VARS:
            assert env[name] == "", f"{name} from the env file must be overridden empty"
        assert env["IRIS_API_TOKEN"] == PARENT_SECRETS["IRIS_API_TOKEN"]
    finally:
        assert docker_agents.remove("envy", print)
    assert inspect_container("iris-agent-envy") is None
    assert not docker_agents.exists("envy")
    assert not docker_agents.remove("envy", print)


def test_remove_takes_the_container_away(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(
        tmp_path_factory.mktemp("homes"), "brief", "store", "http://127.0.0.1:3000"
    )
    docker_agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert container_state("iris-agent-brief") in {"running", "restarting"}
    lines: list[str] = []
    assert docker_agents.remove("brief", lines.append)
    print("\n".join(lines))
    assert any("module.agent_brief.terraform_data.container: delete" in line for line in lines)
    assert not any("leftover" in line for line in lines), "the module's destroy removed it"
    assert inspect_container("iris-agent-brief") is None
    assert "iris-agent brief" not in docker_agents.agents_file.read_text()
    assert not docker_agents.exists("brief")
    # The follow-up apply dropped its output too: nothing is left to change.
    assert docker_agents.terraform.plan(var_files=[docker_agents.var_file]) is False


def test_a_failed_apply_rolls_back(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(tmp_path_factory.mktemp("homes"), "broken", "store", "")
    before = docker_agents.agents_file.read_text()
    # A home that is not a directory: docker run fails to mount it.
    bad = AgentLaunch(
        name=launch.name,
        home=launch.home / "not-a-dir",
        bridge_port=launch.bridge_port,
        api_port=launch.api_port,
        command=launch.command,
        environment=launch.environment,
    )
    bad.home.write_text("")
    with pytest.raises(ProvisionError, match="terraform apply failed"):
        docker_agents.install(bad, secrets_mode="store", unique_token=True, progress=print)
    assert docker_agents.agents_file.read_text() == before
    assert inspect_container("iris-agent-broken") is None
    assert not docker_agents.exists("broken")
    assert docker_agents.terraform.planned_changes(var_files=[docker_agents.var_file]) == (
        False,
        [],
    )


def test_preflight_refuses_a_name_docker_cannot_use_and_writes_nothing(
    docker_agents: DockerAgents,
) -> None:
    before = docker_agents.agents_file.read_text()
    docker_agents.preflight("my_agent")  # any registry name works in Docker mode
    docker_agents.preflight(LONGEST_NAME)
    for bad in ("My.Agent", "-x", "a" * 64):
        with pytest.raises(InvalidInput, match="cannot be used for a container"):
            docker_agents.preflight(bad)
    assert docker_agents.agents_file.read_text() == before
